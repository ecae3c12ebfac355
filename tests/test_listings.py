"""C and C++ listings under code/ (not CUDA) compile with -Wall -Wextra -Werror and run under sanitizers.

Each listing declares how it is tested in `// listing:` lines at its top (see CONTRIBUTING.md):

    // listing: run                               build with ASan + UBSan, run, expect exit 0 and no report
    // listing: expect-sanitizer=leak             the listing leaks on purpose: LeakSanitizer must report it
    // listing: expect-sanitizer=thread           the listing races on purpose: ThreadSanitizer must report it
    // listing: expect-sanitizer=address          the listing has a memory error on purpose: ASan must report it
    // listing: reject=NAME error=REGEX           also compile with -DNAME, which must fail with an error matching REGEX
    // listing: stdout=REGEX                      the program's output must match REGEX
    // listing: std=c++17                         language standard (default c++20 for C++, c17 for C)
    // listing: flags=-O2 -pthread                extra compiler flags

A listing meant to show a bug is built twice: with the sanitizer that must catch the bug, and (for
`leak`/`address`) with `-DFIXED`, which must then run clean, so the fixed version is tested too.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT

SOURCES = sorted(p for p in (ROOT / "code").rglob("*") if p.suffix in {".c", ".cpp"} and p.parent.name != "linking")
SANITIZER_REPORTS = {
    "leak": "ERROR: LeakSanitizer: detected memory leaks",
    "thread": "WARNING: ThreadSanitizer: data race",
    "address": "ERROR: AddressSanitizer:",
}
SAN_ENV = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1", "TSAN_OPTIONS": "halt_on_error=0"}


@dataclass
class Spec:
    path: Path
    expect: str | None = None
    rejects: list[tuple[str, str]] = field(default_factory=list)
    stdout: str | None = None
    std: str | None = None
    flags: list[str] = field(default_factory=list)

    @property
    def compiler(self) -> str:
        return "gcc" if self.path.suffix == ".c" else "g++"

    def command(self, out: Path, sanitize: str, *defines: str) -> list[str]:
        std = self.std or ("c17" if self.path.suffix == ".c" else "c++20")
        cmd = [self.compiler, f"-std={std}", "-Wall", "-Wextra", "-Werror", "-g", "-fno-omit-frame-pointer",
               f"-fsanitize={sanitize}", *[f"-D{d}" for d in defines], str(self.path), "-o", str(out), *self.flags]
        return cmd if "-pthread" in cmd else [*cmd, "-pthread"]


def parse(path: Path) -> Spec:
    spec = Spec(path)
    seen = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"\s*//\s*listing:\s*(.*)$", line)
        if not m:
            continue
        seen = True
        body = m.group(1).strip()
        where = f"{path.relative_to(ROOT)}:{number}"
        if body == "run":
            continue
        if body.startswith("reject="):
            r = re.match(r"reject=(\w+)\s+error=(.+)$", body)
            assert r, f"{where}: write `// listing: reject=NAME error=REGEX`"
            spec.rejects.append((r.group(1), r.group(2)))
        elif body.startswith("expect-sanitizer="):
            spec.expect = body.split("=", 1)[1]
            assert spec.expect in SANITIZER_REPORTS, f"{where}: expect-sanitizer must be one of {sorted(SANITIZER_REPORTS)}"
        elif body.startswith("stdout="):
            spec.stdout = body.split("=", 1)[1]
        elif body.startswith("std="):
            spec.std = body.split("=", 1)[1]
        elif body.startswith("flags="):
            spec.flags = shlex.split(body.split("=", 1)[1])
        else:
            pytest.fail(f"{where}: unknown directive `{body}`; see the docstring of tests/test_listings.py")
    assert seen, f"{path.relative_to(ROOT)}: add a `// listing: run` line (or another directive) at the top"
    return spec


def build(spec: Spec, tmp: Path, sanitize: str, *defines: str) -> Path:
    out = tmp / ("prog-" + "-".join([sanitize.replace(",", "_"), *defines]))
    proc = subprocess.run(spec.command(out, sanitize, *defines), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{spec.path.relative_to(ROOT)} does not compile ({' '.join(defines) or 'default'}):\n{proc.stderr}"
    return out


def run(program: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(program)], capture_output=True, text=True, timeout=120, env=SAN_ENV)


def assert_clean(spec: Spec, proc: subprocess.CompletedProcess, label: str) -> None:
    name = spec.path.relative_to(ROOT)
    assert proc.returncode == 0, f"{name} ({label}) exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert "runtime error:" not in proc.stderr and "Sanitizer" not in proc.stderr, f"{name} ({label}): sanitizer report:\n{proc.stderr}"
    if spec.stdout:
        assert re.search(spec.stdout, proc.stdout), f"{name} ({label}): output does not match /{spec.stdout}/:\n{proc.stdout}"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed: the C/C++ listings were not compiled")
@pytest.mark.parametrize("path", SOURCES, ids=[p.relative_to(ROOT).as_posix() for p in SOURCES])
def test_listing(path, tmp_path):
    spec = parse(path)
    if spec.expect is None:
        assert_clean(spec, run(build(spec, tmp_path, "address,undefined")), "ASan+UBSan")
    else:
        sanitize = "thread" if spec.expect == "thread" else "address,undefined"
        proc = run(build(spec, tmp_path, sanitize))
        assert SANITIZER_REPORTS[spec.expect] in proc.stderr, (
            f"{path.relative_to(ROOT)} should show a {spec.expect} bug, but the sanitizer reported nothing:\n{proc.stderr}")
        fixed_sanitize = "thread" if spec.expect == "thread" else "address,undefined"
        assert_clean(spec, run(build(spec, tmp_path, fixed_sanitize, "FIXED")), "-DFIXED")
    for define, pattern in spec.rejects:
        cmd = spec.command(tmp_path / "reject", "address,undefined", define)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0, f"{path.relative_to(ROOT)}: with -D{define} it should not compile, but it did"
        assert re.search(pattern, proc.stderr), (
            f"{path.relative_to(ROOT)}: with -D{define} the compiler error does not match /{pattern}/:\n{proc.stderr[-3000:]}")


def test_every_listing_is_embedded_in_a_page():
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    missing = [p.relative_to(ROOT).as_posix() for p in SOURCES + sorted((ROOT / "code").rglob("*.py"))
               if f'--8<-- "{p.relative_to(ROOT).as_posix()}' not in pages]
    assert not missing, f"listings not embedded in any page with --8<--: {missing}"
