"""code/compiler/xla_demo.py: JAX's StableHLO and XLA's optimised HLO on CPU; the fused program against op-by-op
execution; the committed records against what the installed jax prints."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import ROOT

jax = pytest.importorskip("jax")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import xla_demo as X  # noqa: E402

RECORDS = ROOT / "code" / "compiler" / "records"


def body(name):
    return "\n".join((RECORDS / name).read_text().splitlines()[3:])


def test_fusion_shrinks_dozens_of_ops_to_a_few_kernels_and_keeps_the_result():
    x, s, t = X.example_inputs()
    st = X.stages(X.gelu_softmax, x, s, t)
    assert X.count_stablehlo_ops(st["stablehlo"]) > 20
    fs = X.fusions(st["optimized"])
    assert 1 <= len(fs) <= 6
    fused = np.asarray(st["compiled"](x, s, t))
    with jax.disable_jit():
        eager = np.asarray(X.gelu_softmax(x, s, t))
    np.testing.assert_allclose(fused, eager, rtol=1e-5, atol=1e-6)


def test_records_are_what_this_jax_prints():
    import jaxlib

    assert (RECORDS / "xla-stablehlo.txt").read_text().startswith(f"# tool: jax {jax.__version__}, jaxlib {jaxlib.__version__}")
    st = X.stages(X.gelu_softmax, *X.example_inputs())
    assert body("xla-stablehlo.txt").strip() == st["stablehlo"].strip()
    # XLA's CPU fusion choices can depend on the host's instruction set: on another machine, require only a
    # well-formed module whose entry is made of fusions, like the one recorded here
    recorded = body("xla-optimized-hlo.txt")
    from jaxlib import _hlo

    _hlo.hlo_module_from_text(recorded)
    assert len(X.fusions(recorded)) == 4 and "broadcast_divide_fusion" in recorded
    assert len(X.fusions(st["optimized"])) >= 1
