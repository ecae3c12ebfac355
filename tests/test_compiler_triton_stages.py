"""code/compiler/triton_stages.py: triton 3.9 compiles for a GPU target without a GPU, through TTIR, TTGIR, LLVM IR,
PTX and cubin; the divisibility hints turn into 4-element layouts, 128-bit PTX loads and LDG.E.128 in SASS; the
committed records name the installed triton."""
from __future__ import annotations

import os
import re
import sys

import pytest

from conftest import ROOT

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
triton = pytest.importorskip("triton")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import triton_stages as T  # noqa: E402

RECORDS = ROOT / "code" / "compiler" / "records"

@pytest.fixture(scope="module")
def aligned():
    return T.compile_for(90)[0]


def test_every_stage_is_produced_without_a_gpu(aligned):
    assert set(aligned) >= {"ttir", "ttgir", "llir", "ptx", "cubin"}
    assert "tt.load" in aligned["ttir"] and "#ttg.blocked" not in aligned["ttir"]  # TTIR has no layouts yet
    assert 'ttg.target = "cuda:90"' in aligned["ttgir"]
    assert "@llvm.nvvm.read.ptx.sreg.ctaid.x" in aligned["llir"]
    assert re.search(r"^\.target sm_90a$", aligned["ptx"], re.M)


def test_divisibility_hints_give_vector_accesses(aligned):
    unaligned = T.compile_for(90, aligned=False)[0]
    assert "sizePerThread = [4]" in aligned["ttgir"] and "sizePerThread = [1]" in unaligned["ttgir"]
    assert aligned["ptx"].count("ld.global.v4.b32") == 4 and "ld.global.v4" not in unaligned["ptx"]
    sass = T.sass(aligned["cubin"])
    assert sass.count("LDG.E.128") == 4 and sass.count("STG.E.128") == 2 and sass.count("FADD") == 8
    report = T.ptxas_report(aligned["ptx"])
    assert "0 bytes spill stores" in report and re.search(r"Used \d+ registers", report)


def test_records_name_the_installed_triton():
    for name in ["triton-ttir.txt", "triton-ttgir.txt", "triton-ptx.txt", "triton-sass-sm90.txt", "triton-sass-sm80.txt"]:
        assert (RECORDS / name).read_text().startswith(f"# tool: triton {triton.__version__}"), name
    assert "LDG.E.128" in (RECORDS / "triton-sass-sm90.txt").read_text()
