"""CUDA C++ listings compile for Hopper (sm_90) and Ampere (sm_80) where nvcc exists."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import ROOT

SOURCES = sorted((ROOT / "code").rglob("*.cu"))
NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine: the CUDA listings were not compiled")
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("source", SOURCES, ids=[p.relative_to(ROOT).as_posix() for p in SOURCES])
def test_cuda_listing_compiles(source, arch, tmp_path):
    out = subprocess.run([NVCC, "-O3", f"-arch={arch}", "-Werror", "all-warnings", "-o", str(tmp_path / "a.out"), str(source)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{source.relative_to(ROOT)} does not compile for {arch}:\n{out.stderr}"


def test_cuda_listings_exist_and_are_embedded():
    assert SOURCES
    page = (ROOT / "docs" / "operator" / "index.md").read_text(encoding="utf-8")
    assert '--8<-- "code/operator/vector-add.cu:kernel"' in page
