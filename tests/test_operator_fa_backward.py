"""FlashAttention backward (notebooks/operator/flash-attention-lab.ipynb) and the fp8 library rung of the GEMM lab.

The kernels live only in the labs' cells tagged `kernel` / `bench`; these tests run those cells the way
`python -m bench` does (tools.labs.as_module), in Triton's CPU interpreter, at tiny sizes.
"""
from __future__ import annotations

import math
import os
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["LAB_FORCE_CPU"] = "1"  # the setup cell then sets TRITON_INTERPRET / NUMBA_ENABLE_CUDASIM

from tools import labs  # noqa: E402

torch = pytest.importorskip("torch")


def _lab(slug: str) -> dict:
    module = labs.as_module(ROOT / "notebooks" / "operator" / f"{slug}.ipynb", {labs.SETUP_TAG, "kernel", "bench"})
    return runpy.run_path(str(module), run_name="__lab__")


@pytest.fixture(scope="module")
def fa():
    ns = _lab("flash-attention-lab")
    assert ns["ON_GPU"] is False
    return ns


@pytest.fixture(scope="module")
def gemm():
    return _lab("gemm-lab")


def _inputs(shape, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen).to(torch.float16) for _ in range(4)]


def _grads64(q, k, v, do, causal):
    """float64 autograd of the textbook attention: an oracle independent of the lab's GradReference."""
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    s = leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ leaves[2]
    return torch.autograd.grad(o, leaves, do.double())


@pytest.mark.parametrize("shape,causal", [((1, 2, 64, 64), False), ((1, 2, 64, 64), True),
                                          ((1, 1, 100, 64), False), ((1, 1, 100, 64), True),
                                          ((1, 1, 64, 128), True)])
def test_backward_matches_autograd(fa, shape, causal):
    q0, k0, v0, do = _inputs(shape, seed=sum(shape) + causal)
    q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
    o = fa["flash_attention_autograd"](q, k, v, causal)
    (o.float() * do.float()).sum().backward()  # dLoss/dO = dO: loss.backward() goes through the Triton kernels
    ratio = fa["GradReference"](q0, k0, v0, do, causal).check(q.grad, k.grad, v.grad)
    assert 0 < ratio < 0.5  # well inside the derived bound, and not trivially zero
    for got, ref in zip((q.grad, k.grad, v.grad), _grads64(q0, k0, v0, do, causal)):
        torch.testing.assert_close(got.double(), ref, atol=3e-3, rtol=2e-2)  # fp16 storage of the gradients


def test_forward_saves_logsumexp(fa):
    q, k, v, _ = _inputs((1, 2, 100, 64), seed=7)
    for causal in (False, True):
        _, lse = fa["flash_attention"](q, k, v, causal)
        s = q.double() @ k.double().transpose(-2, -1) / 8.0
        if causal:
            s = s.masked_fill(torch.ones(100, 100, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(lse.double(), torch.logsumexp(s, dim=-1), atol=1e-4, rtol=1e-5)


def test_gradient_bound_rejects_wrong_gradients(fa):
    """The bound is loose enough for fp16 yet catches the classic mistakes: dropping D, or dK for dQ."""
    q, k, v, do = _inputs((1, 1, 64, 64), seed=3)
    ref = fa["GradReference"](q, k, v, do, False)
    p = torch.softmax(q.float() @ k.float().transpose(-2, -1) / 8.0, dim=-1)
    dp = do.float() @ v.float().transpose(-2, -1)
    ds_no_d = p * dp  # should be P∘(dP − D)
    dq_bad = (ds_no_d @ k.float() / 8.0).half()
    with pytest.raises(AssertionError, match="dQ"):
        ref.check(dq_bad, ref.dk.half(), ref.dv.half())
    with pytest.raises(AssertionError, match="dQ"):
        ref.check(ref.dk.half(), ref.dk.half(), ref.dv.half())
    assert ref.check(ref.dq.half(), ref.dk.half(), ref.dv.half()) < 0.5


def test_bench_rungs_and_flop_convention(fa):
    rungs, ref = fa["RUNGS"], fa["BENCH_REFERENCE"]
    bwd = [r for r in rungs if "-bwd-" in r]
    assert len(bwd) == 16 and set(bwd) == set(fa["BWD_RUNGS"])
    for name in ("d64", "d64-causal", "d128", "d128-causal"):
        for kind in ("triton", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"):
            assert ref[f"{kind}-bwd-{name}"] == [f"sdpa-{b}-bwd-{name}" for b in ("flash", "cudnn", "efficient")]
            assert fa["_split_rung"](f"{kind}-bwd-{name}") == (kind, True, name)
        assert fa["_split_rung"](f"triton-{name}") == ("triton", False, name)
    case = fa["_PerRungCase"](flops=4, bytes=8, rung_flops={"a": 4, "a-bwd-d64": 10}, rung_bytes={"a": 8, "a-bwd-d64": 16})
    assert case["flops"] == 4
    case.current = "a-bwd-d64"
    assert (case["flops"], case["bytes"]) == (10, 16)  # backward: 5 matmuls vs 2, minimum traffic doubled


def test_fp8_library_rung_on_cpu(gemm):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(64, 128, generator=gen).half()
    b = torch.randn(128, 96, generator=gen).half()
    a8, sa = gemm["quantize_fp8"](a)
    b8, sb = gemm["quantize_fp8"](b, column_major=True)
    assert a8.dtype == torch.float8_e4m3fn and b8.stride(0) == 1  # B column-major, as torch._scaled_mm requires
    c = torch.full((64, 96), float("nan"), dtype=torch.bfloat16)
    gemm["matmul_fp8"](a8, b8, sa, sb, out=c)
    ref = gemm["Fp8GemmReference"](a8, sa, b8, sb)
    assert ref.check(c) < 1
    # dequantised inputs are close to the originals: e4m3 keeps 3 fraction bits (relative step 2^-3)
    assert ((a8.float() * sa - a.float()).abs() <= 2.0**-4 * a.float().abs() + sa * 2.0**-9).all()
    with pytest.raises(AssertionError):
        ref.check((c.float() * 2).bfloat16())  # a forgotten scale factor is caught
    with pytest.raises(AssertionError):
        gemm["matmul_fp8"](a8, b8.contiguous(), sa, sb)  # row-major B is refused before cuBLASLt sees it
