"""code/compiler/kernel_languages.py: Gluon enters triton 3.9's pipeline at TritonGPU IR (no TTIR stage); with the
layout Triton's Coalesce pass would choose, its TTGIR is Triton's TTGIR line for line; with a one-element-per-thread
layout the compiler keeps the programmer's choice and emits 32-bit loads although the pointers are aligned. The
committed Gluon record is what triton compiles now."""
from __future__ import annotations

import os
import sys

import pytest

from conftest import ROOT

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
triton = pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import kernel_languages as K  # noqa: E402
import triton_stages as T  # noqa: E402

RECORD = ROOT / "code" / "compiler" / "records" / "gluon-ttgir.txt"


@pytest.fixture(scope="module")
def triton_asm():
    return T.compile_for(90)[0]


@pytest.fixture(scope="module")
def gluon4():
    return K.compile_gluon(4)


def test_gluon_starts_below_ttir(triton_asm, gluon4):
    assert "ttir" in triton_asm and "ttir" not in gluon4
    assert {"glir", "ttgir", "llir", "ptx", "cubin"} <= set(gluon4)


def test_gluon_with_the_coalesced_layout_gives_tritons_ttgir(triton_asm, gluon4):
    ours = T.strip_locations(gluon4["ttgir"]).replace("@add_kernel_gluon", "@add_kernel")
    assert ours == T.strip_locations(triton_asm["ttgir"])
    assert K.load_widths(gluon4["ptx"]) == K.load_widths(triton_asm["ptx"]) == {"v4": 4, "b32": 0}


def test_gluon_keeps_the_programmers_layout():
    asm = K.compile_gluon(1)
    assert "sizePerThread = [1]" in asm["ttgir"]
    assert K.load_widths(asm["ptx"]) == {"v4": 0, "b32": 16}  # aligned pointers, yet scalar loads


def test_record_is_what_gluon_compiles_now(gluon4):
    lines = RECORD.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith(f"# tool: triton {triton.__version__} (Gluon)")
    assert "\n".join(lines[3:]) == T.strip_locations(gluon4["ttgir"]).rstrip()
