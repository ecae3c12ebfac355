"""The linking demo of code/foundations/cpp/linking/ shows what the C++ page says about linking and loading.

`build.sh` (embedded in docs/foundations/cpp/linking.md) builds a tiny library as a static archive and as a
shared object, and programs linked against each; these tests run it in a temporary folder and assert the
observable facts with nm, readelf, objdump, ldd and the dynamic loader itself.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

DEMO = ROOT / "code" / "foundations" / "cpp" / "linking"
TOOLS = ("g++", "ar", "nm", "readelf", "objdump", "ldd")
pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() != "x86_64" or any(shutil.which(t) is None for t in TOOLS),
    reason="the linking demo asserts facts of x86-64 Linux ELF with the GNU toolchain",
)
DOT = "_Z3dotPKdS0_i"            # dot(double const*, double const*, int)
VERSION = "_Z11vec_versionv"     # vec_version()
# The loader must not find libvec through anything but what each test sets.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}


def sh(*cmd: str, cwd: Path, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**CLEAN_ENV, "LC_ALL": "C", **(env or {})})
    if check:
        assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("linking")
    sh("bash", str(DEMO / "build.sh"), str(out), cwd=out)
    return out


def symbols(out: Path, file: str) -> dict[str, str]:
    """name -> nm type letter (T defined in text, U undefined, W weak, t local text, ...)."""
    table = {}
    for line in sh("nm", file, cwd=out).stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            table[parts[-1]] = parts[-2]
    return table


def dynamic(out: Path, file: str) -> str:
    return sh("readelf", "-d", file, cwd=out).stdout


def run(out: Path, program: str, **env: str) -> subprocess.CompletedProcess:
    return sh(f"./{program}", cwd=out, env=env, check=False)


def test_static_link_copies_the_code_in_and_needs_no_library(out):
    table = symbols(out, "app-static")
    assert table[DOT] == "T" and table[VERSION] == "T"
    assert "libvec" not in dynamic(out, "app-static")
    proc = run(out, "app-static")
    assert proc.returncode == 0 and "version=v1" in proc.stdout


def test_dynamic_link_leaves_the_symbol_undefined_and_records_the_soname(out):
    table = symbols(out, "app-runpath")
    assert table[DOT] == "U" and table[VERSION] == "U"
    d = dynamic(out, "app-runpath")
    assert re.search(r"\(NEEDED\)\s+Shared library: \[libvec\.so\.1\]", d), d  # the soname, not the file name
    assert re.search(r"\(RUNPATH\)\s+Library runpath: \[\$ORIGIN/v1\]", d), d
    assert re.search(r"\(RPATH\)\s+Library rpath: \[\$ORIGIN/v1\]", dynamic(out, "app-rpath"))


def test_calls_into_a_shared_library_go_through_the_plt(out):
    relocs = sh("readelf", "-rW", "app-runpath", cwd=out).stdout
    assert re.search(rf"R_X86_64_JUMP_SLOT\s+0+\s+{DOT}", relocs), relocs
    assert re.search(rf"call\s+[0-9a-f]+ <{DOT}@plt>", sh("objdump", "-d", "app-runpath", cwd=out).stdout)
    assert re.search(rf"call\s+[0-9a-f]+ <{DOT}>", sh("objdump", "-d", "app-static", cwd=out).stdout)
    # the executable reads the library's variable directly: the loader copies it into the executable
    assert re.search(r"R_X86_64_COPY\s+[0-9a-f]+\s+vec_calls", relocs), relocs
    assert "Requesting program interpreter: /lib64/ld-linux-x86-64.so.2" in sh("readelf", "-l", "app-runpath", cwd=out).stdout


def test_position_independent_library_reaches_its_own_globals_through_the_got(out):
    relocs = sh("readelf", "-rW", "v1/libvec.so.1", cwd=out).stdout
    assert re.search(r"R_X86_64_GLOB_DAT\s+[0-9a-f]+\s+vec_calls", relocs), relocs
    # its own exported function may be interposed, so even the library's internal call goes through its PLT
    assert re.search(rf"R_X86_64_JUMP_SLOT\s+[0-9a-f]+\s+{VERSION}", relocs), relocs
    assert re.search(rf"call\s+[0-9a-f]+ <{VERSION}@plt>", sh("objdump", "-d", "v1/libvec.so.1", cwd=out).stdout)


@pytest.mark.parametrize("pic", ["-fno-pic", "-fPIE"])
def test_a_shared_object_needs_pic_code(out, pic):
    sh("g++", "-std=c++20", "-O0", pic, "-c", str(DEMO / "vec.cpp"), "-o", "nopic.o", cwd=out)
    proc = sh("g++", "-shared", "nopic.o", "-o", "libnopic.so", cwd=out, check=False)
    assert proc.returncode != 0 and "recompile with -fPIC" in proc.stderr, proc.stderr


def test_the_loader_needs_to_be_told_where_the_library_is(out):
    proc = run(out, "app-bare")
    assert proc.returncode == 127
    assert "error while loading shared libraries: libvec.so.1: cannot open shared object file" in proc.stderr
    assert re.search(r"libvec\.so\.1 => not found", sh("ldd", "app-bare", cwd=out).stdout)
    assert "version=v1" in run(out, "app-bare", LD_LIBRARY_PATH=str(out / "v1")).stdout
    assert re.search(r"libvec\.so\.1 => \S*/v1/libvec\.so\.1", sh("ldd", "app-runpath", cwd=out).stdout)
    assert "version=v1" in run(out, "app-runpath").stdout


def test_search_order_rpath_then_ld_library_path_then_runpath(out):
    v2 = str(out / "v2")
    assert "version=v2" in run(out, "app-runpath", LD_LIBRARY_PATH=v2).stdout  # LD_LIBRARY_PATH beats RUNPATH
    assert "version=v1" in run(out, "app-rpath", LD_LIBRARY_PATH=v2).stdout    # RPATH beats LD_LIBRARY_PATH
    debug = run(out, "app-runpath", LD_DEBUG="libs").stderr
    assert "find library=libvec.so.1" in debug and "(RUNPATH from file ./app-runpath)" in debug


def test_ld_preload_interposes_on_dynamic_symbols_only(out):
    preload = str(out / "libpreload.so")
    proc = run(out, "app-runpath", LD_PRELOAD=preload)
    assert "version=preloaded" in proc.stdout and "banner: preloaded" in proc.stdout  # even the library's own call
    proc = run(out, "app-static", LD_PRELOAD=preload)
    assert "version=v1" in proc.stdout and "banner: v1" in proc.stdout  # resolved at link time: nothing to interpose


def test_bind_now_is_recorded_in_the_dynamic_section(out):
    assert "BIND_NOW" in dynamic(out, "app-now")
    assert "BIND_NOW" not in dynamic(out, "app-runpath")


def test_a_static_archive_must_come_after_the_objects_that_use_it(out):
    proc = sh("g++", "static/libvec.a", "main.o", "-o", "app-wrong-order", cwd=out, check=False)
    assert proc.returncode != 0 and "undefined reference to `dot(double const*, double const*, int)'" in proc.stderr
    sh("g++", "main.o", "static/libvec.a", "-o", "app-right-order", cwd=out)


def test_static_functions_have_internal_linkage(out):
    assert symbols(out, "vec.o")["_ZL12scale_factorv"] == "t"  # lowercase: a local symbol
    proc = sh("g++", "-std=c++20", "-DUSE_INTERNAL", str(DEMO / "main.cpp"), "static/libvec.a", "-o", "app-internal",
              cwd=out, check=False)
    assert proc.returncode != 0 and "undefined reference to `scale_factor()'" in proc.stderr, proc.stderr


def test_template_instantiations_are_weak_and_merged(out):
    square = "_Z6squareIdET_S0_"  # square<double>
    assert symbols(out, "main.o")[square] == "W" and symbols(out, "vec.o")[square] == "W"
    listing = sh("nm", "app-static", cwd=out).stdout
    assert len(re.findall(rf"\s{square}$", listing, re.M)) == 1  # two weak copies in, one out


def test_fully_static_executable_has_no_dynamic_section(out):
    proc = sh("g++", "-static", "main.o", "static/libvec.a", "-o", "app-full-static", cwd=out, check=False)
    if proc.returncode != 0:
        pytest.skip(f"no static libc/libstdc++ here: {proc.stderr[-300:]}")
    assert "There is no dynamic section in this file." in dynamic(out, "app-full-static")
    assert "version=v1" in run(out, "app-full-static").stdout
