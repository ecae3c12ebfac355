"""CUDA C++ listings compile for Hopper (sm_90) and Ampere (sm_80) where nvcc exists.

A listing's extra nvcc options come from `// nvcc-flags:` and `// nvcc-variant:` lines at its top
(bench.gpu_check.cuda_builds, which `make gpu-check` uses too): every build of every listing compiles.
A `// nvcc-arch: sm_90` line limits a listing that needs Hopper features to the architectures it names
(bench.gpu_check.cuda_archs); it is then not compiled for the others.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from bench.gpu_check import build_arch, cuda_archs, cuda_builds, run_cuda
from conftest import ROOT

SOURCES = sorted((ROOT / "code").rglob("*.cu"))
BUILDS = [(src, extra) for src in SOURCES for extra in cuda_builds(src)]
NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine: the CUDA listings were not compiled")
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("source,extra", BUILDS,
                         ids=[src.relative_to(ROOT).as_posix() + "".join(f" {o}" for o in extra) for src, extra in BUILDS])
def test_cuda_listing_compiles(source, extra, arch, tmp_path):
    arch = build_arch(source, arch)  # sm_90 → sm_90a for a listing that needs the arch-specific target
    if cuda_archs(source) is not None and arch not in cuda_archs(source):
        pytest.skip(f"{source.name} needs {' '.join(cuda_archs(source))} (its `// nvcc-arch:` line)")
    out = subprocess.run([NVCC, "-O3", f"-arch={arch}", "-Werror", "all-warnings", "-o", str(tmp_path / "a.out"), str(source),
                          *extra], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{source.relative_to(ROOT)} {' '.join(extra)} does not compile for {arch}:\n{out.stderr}"


def test_nvcc_header_lines(tmp_path):
    """`// nvcc-flags:` is added to every build, each `// nvcc-variant:` adds a build; the header ends at code."""
    src = tmp_path / "x.cu"
    src.write_text("// nvcc-flags: -rdc=true -lcudadevrt\n//\n// nvcc-variant: -use_fast_math -DFAST\n\n"
                   "#include <cstdio>\n// nvcc-variant: -G\n", encoding="utf-8")
    assert cuda_builds(src) == [["-rdc=true", "-lcudadevrt"], ["-rdc=true", "-lcudadevrt", "-use_fast_math", "-DFAST"]]
    plain = tmp_path / "y.cu"
    plain.write_text("// a listing\n#include <cstdio>\n", encoding="utf-8")
    assert cuda_builds(plain) == [[]]


def test_nvcc_arch_line(tmp_path):
    """`// nvcc-arch:` names the only architectures a listing is built for; it adds no build and no flag."""
    src = tmp_path / "x.cu"
    src.write_text("// nvcc-arch: sm_90\n// nvcc-flags: -DX\n#include <cstdio>\n// nvcc-arch: sm_80\n", encoding="utf-8")
    assert cuda_archs(src) == ["sm_90"] and cuda_builds(src) == [["-DX"]]
    plain = tmp_path / "y.cu"
    plain.write_text("// a listing\n#include <cstdio>\n", encoding="utf-8")
    assert cuda_archs(plain) is None
    needs_hopper = [p.name for p in SOURCES if cuda_archs(p) == ["sm_90"]]
    assert {"cluster-dsmem.cu", "mbarrier-pipeline.cu"} <= set(needs_hopper)
    # wgmma and setmaxnreg exist only on the arch-specific target: such a listing is built with -arch=sm_90a
    specific = tmp_path / "z.cu"
    specific.write_text("// nvcc-arch: sm_90a\n#include <cstdio>\n", encoding="utf-8")
    assert build_arch(specific, "sm_90") == "sm_90a" and build_arch(src, "sm_90") == "sm_90"
    assert build_arch(ROOT / "code" / "operator" / "hopper-gemm.cu", "sm_90") == "sm_90a"


def test_cuda_listings_exist_and_are_embedded():
    assert SOURCES
    page = (ROOT / "docs" / "operator" / "index.md").read_text(encoding="utf-8")
    assert '--8<-- "code/operator/vector-add.cu:kernel"' in page


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
def test_an_arch_specific_listing_is_not_run_on_another_gpu():
    """hopper-gemm.cu names only sm_90a: on a newer GPU (no wgmma, no setmaxnreg) gpu-check says why and
    does not build it, and on an older one too; only on sm_90 is it built, as sm_90a."""
    listing = ROOT / "code" / "operator" / "hopper-gemm.cu"
    for arch in ("sm_100", "sm_80"):
        res = run_cuda(listing, arch, timeout=60)
        assert res.get("not_run") and "sm_90a" in res["tail"] and arch in res["tail"]
