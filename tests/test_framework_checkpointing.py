"""code/framework/checkpointing.py: the pieces that make a resumed run bit-identical (Adam independent of
the shard boundaries, a fixed summation order, stateful loader/schedule/RNG), the end-to-end DCP run
(save on 4 gloo ranks, load on 2 and on 1, continue), and the checkpoint-interval helpers
(docs/framework/checkpointing.md)."""
from __future__ import annotations

import math
import random
import shutil
import sys
import tempfile

import numpy as np
import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
sys.path.insert(0, str(ROOT / "code" / "runtime"))
import checkpoint_sim as cs  # noqa: E402
import checkpointing as ck  # noqa: E402
import dist_launch  # noqa: E402


def _adam_sharded(p, g, world, steps=3):
    p, n = p.clone(), p.numel()
    m, v = torch.zeros(n), torch.zeros(n)
    for t in range(1, steps + 1):
        for r in range(world):
            lo, hi = r * n // world, (r + 1) * n // world
            ck.adam_update(p[lo:hi], g[lo:hi] * t, m[lo:hi], v[lo:hi], t, 1e-2)
    return p


def test_adam_update_does_not_depend_on_the_shard_boundaries():
    g0 = torch.Generator().manual_seed(0)
    p, g = torch.randn(10496, generator=g0), torch.randn(10496, generator=g0)
    ref = _adam_sharded(p, g, 1)
    for world in (2, 4, 3, 7):                      # including boundaries that cut SIMD vectors
        assert torch.equal(_adam_sharded(p, g, world), ref)


def test_fixed_order_sum_and_why_it_matters():
    rows = torch.tensor([[1e8], [1.0], [-1e8], [1.0]], dtype=torch.float32)
    assert ck.fixed_order_sum(rows).item() == 1.0                       # ((1e8 + 1) - 1e8) + 1 in fp32
    assert (rows[0] + rows[2] + (rows[1] + rows[3])).item() == 2.0      # another association, another answer


def test_loader_schedule_and_rng_state_roundtrip():
    a = ck.Loader(50, 8, seed=3)
    for _ in range(9):                              # crosses an epoch boundary
        a.next()
    b = ck.Loader(50, 8, seed=99)
    b.load_state_dict(a.state_dict())
    for _ in range(10):
        assert np.array_equal(a.next(), b.next())
    s = ck.WarmupCosine(base_lr=1.0, warmup=2, total=10)
    lrs = []
    for _ in range(12):
        lrs.append(s.lr())
        s.step()
    assert lrs[:2] == [0.5, 1.0] and lrs[2] == 1.0 and abs(lrs[-1] - 0.1) < 1e-12
    s2 = ck.WarmupCosine(base_lr=1.0, warmup=2, total=10)
    s2.load_state_dict({"last": 5})
    assert s2.lr() == lrs[5]
    saved = ck.capture_rank_rng()
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    ck.restore_rank_rng(saved)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws


def test_interval_helpers():
    assert ck.job_mtbf_hours(419, 54) == pytest.approx(3.093, abs=1e-3)   # Llama 3, 16K GPUs, 54 days
    delta, mtbf = 60.0, ck.job_mtbf_hours(419, 54) * 3600
    taus = cs.daly_interval(delta, mtbf) * np.exp(np.linspace(math.log(0.4), math.log(2.5), 9))
    exact = [float(cs.expected_wall_time(t, delta, mtbf, 0.0, 1.0)) - 1 for t in taus]
    assert ck.fitted_optimum(taus, exact) == pytest.approx(cs.optimal_interval_numeric(delta, mtbf), rel=0.03)


def test_dcp_save_on_4_resume_on_2_and_1_is_bit_identical():
    root = tempfile.mkdtemp(prefix="ckpt-test-")
    try:
        steps, save_at, async_at = 8, 3, 5
        ref = dist_launch.launch(ck.worker_save, 4, root, steps, save_at, async_at, timeout=240)
        assert sorted(ref[0]["files"]) == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]
        layout = ck.checkpoint_layout(f"{root}/step{save_at}")
        ppad = ref[0]["Ppad"]
        assert layout["optim.master"]["chunks"] == [((r * ppad // 4,), (ppad // 4,)) for r in range(4)]
        assert layout["model.head.weight"]["chunks"] == [((0, 0), (ck.VOCAB, ck.DIM))]
        for world in (2, 1):
            res = dist_launch.launch(ck.worker_resume, world, root, steps, save_at, async_at, timeout=240)
            for r in res:
                assert r["losses"] == ref[0]["losses"][save_at:]
                assert np.array_equal(r["final"], ref[0]["final"])
                assert r["async_equal"]
                assert r["partial_losses"] != ref[0]["losses"][save_at:save_at + 3]
            assert (res[0]["allreduce_differs"] > 0) == (world > 1)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_page_figures_are_computed():
    """The worked example of docs/framework/checkpointing.md (Llama 3's 419 unexpected interruptions in 54 days
    on 16384 GPUs; 60 s synchronous and 5 s asynchronous saves; the same job on twice the GPUs)."""
    page = (ROOT / "docs" / "framework" / "checkpointing.md").read_text(encoding="utf-8")
    mtbf = ck.job_mtbf_hours(419, 54) * 3600
    assert f"{mtbf / 3600:.2f}$ 小时" in page and f"约 {mtbf * 16384 / 3600 / 24 / 365:.1f} 年" in page
    assert f"\\sqrt{{2 \\times 60 \\times {mtbf:.0f}}} \\approx {cs.young_interval(60, mtbf):.0f}" in page
    best = cs.optimal_interval_numeric(60, mtbf)
    overhead = float(cs.expected_wall_time(best, 60, mtbf, 0.0, 1.0)) - 1
    assert f"{best:.0f} s、{overhead:.1%}" in page
    assert f"\\approx {math.sqrt(120 / mtbf):.1%}".replace("%", "\\%") in page
    assert f"约 {cs.young_interval(5, mtbf):.0f} s，开销约 {math.sqrt(10 / mtbf):.1%}" in page
    half = mtbf / 2
    assert f"约 {cs.young_interval(60, half):.0f} s，开销升到约 {math.sqrt(120 / half):.1%}" in page
    per_gpu = 14 * 70e9 / 1024                                           # bytes per GPU, 14 B/parameter
    assert f"{per_gpu / 1e9:.2f} GB" in page and "$S = 980$ GB" in page
