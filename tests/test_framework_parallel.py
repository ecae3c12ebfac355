"""code/framework/{dist_launch,ddp_scratch}.py: hand-written DDP on 2 gloo ranks against torch DDP,
a single-process run and the byte formulas of docs/framework/data-parallel.md."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import ddp_scratch as ds  # noqa: E402
import dist_launch  # noqa: E402

# fp32 gradients summed in a different order (per-rank means then average vs one global mean):
# a few ulps of values of order 0.1, so 1e-6 absolute is loose enough and far below any real bug.
ATOL = 1e-6


def test_plan_buckets_reverse_order_and_cap():
    sizes = [8192, 256, 16384, 256, 2560, 40]  # Linear(32,64), Linear(64,64), Linear(64,10) in fp32
    assert ds.plan_buckets(sizes, 8192) == [[5, 4, 3, 2], [1, 0]]
    assert ds.plan_buckets(sizes, 10**9) == [[5, 4, 3, 2, 1, 0]]
    assert ds.plan_buckets(sizes, 1) == [[i] for i in reversed(range(6))]


def test_formulas():
    assert ds.ring_bytes_formula(1000, 4) == 2 * 3 * 4000
    assert ds.busbw_factor(8) == pytest.approx(1.75)
    assert ds.busbw_factor(2) == pytest.approx(1.0)


def test_two_rank_ddp_matches_torch_and_single_process():
    res = dist_launch.launch(ds.worker_compare, 2, 8192, "ring", timeout=150)
    r0 = res[0]
    n_params = sum(b // 4 for b in r0["param_bytes"])
    assert n_params == 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    for r in res:
        assert ds.max_abs_diff(r["grad_mine"], r["grad_single"]) < ATOL
        assert ds.max_abs_diff(r["grad_ddp"], r["grad_single"]) < ATOL
        assert ds.max_abs_diff(r["accum_grad_mine"], r["accum_grad_single"]) < ATOL
        assert ds.max_abs_diff(r["params_mine"], r["params_single"]) < 1e-5
        # bytes handed to all-reduce per step = 4 P, one call per bucket; no_sync halves the calls per micro-step
        assert r["bytes_reduced"] == 4 * n_params and r["calls"] == len(r["buckets"]) == 2
        assert r["accum_calls"] == 2 and r["accum_bytes_reduced"] == 4 * n_params
        # overlap: the first bucket is launched before backward has produced the last gradient
        log = r["log"]
        first_launch = next(i for i, e in enumerate(log) if e[0] == "launch")
        last_grad = max(i for i, e in enumerate(log) if e[0] == "grad")
        assert first_launch < last_grad
    # torch DDP rebuilds its buckets after iteration 0 to exactly the hand-written plan
    assert r0["ddp_bucket_bytes"][0] == [4 * n_params]
    assert r0["ddp_bucket_bytes"][1] == [sum(r0["param_bytes"][i] for i in b) for b in r0["buckets"]]
    # ring: all ranks together send 2 (N-1) S bytes
    assert sum(r["bytes_sent"] for r in res) == ds.ring_bytes_formula(n_params, 2)
    assert sum(r["ring_sent"] for r in res) == ds.ring_bytes_formula(n_params, 2)
    assert all(r["ring_err"] < 1e-5 for r in res)
    # replicas stay identical
    assert ds.max_abs_diff(res[1]["params_mine"], r0["params_mine"]) == 0.0
    assert np.isfinite(r0["grad_single"][0]).all()


# ---------- tensor / context parallelism (code/framework/tensor_parallel.py) ----------
import tensor_parallel as tp  # noqa: E402


def test_tp_formulas():
    # one 64 MiB bf16 activation per all-reduce, 4 per layer, t = 8: 448 MiB per rank per layer
    assert tp.tp_allreduce_bytes_per_layer(1, 4096, 8192, 8) == 448 * 2**20
    assert tp.tp_allreduce_bytes_per_layer(1, 4096, 8192, 8, recompute=True) == 672 * 2**20
    assert tp.comm_formula(1, 2, 3, 4, False) == [("all_reduce", "fwd", 24)] * 2 + [("all_reduce", "bwd", 24)] * 2
    assert tp.sharded_attention_heads_ok(64, 8, 8) == "split"
    assert tp.sharded_attention_heads_ok(64, 8, 16) == "replicate"
    assert tp.sharded_attention_heads_ok(40, 8, 16) == "impossible"
    assert tp.ring_attention_bytes(16, 4, 8, 4, 8) == 3 * 2 * 4 * 4 * 8 * 8


def test_tp_and_cp_on_four_ranks_match_unsplit():
    res = dist_launch.launch(tp.worker_tp_cp, 4, timeout=150)
    for r in res:
        for t in (2, 4):
            o = r["tp"][t]
            assert abs(o["loss"] - o["loss_ref"]) < 1e-12  # float64: only summation order differs
            assert o["max_grad_diff"] < 1e-12
            assert o["log"] == o["formula"]
            c = r["cp"][t]
            assert c["ulysses_diff"] < 1e-12 and c["ring_diff"] < 1e-12
            assert [e[2] for e in c["a2a"]] == [tp.ulysses_a2a_elems(16, 4, 8, t)] * 4
            assert c["ring_bytes_sent"] == tp.ring_attention_bytes(16, 4, 8, t, 8)


# ---------- pipeline schedules (code/framework/pipeline.py) ----------
import pipeline as pp  # noqa: E402


def test_pipeline_orders_are_complete():
    for name, (fn, v) in pp.SCHEDULES.items():
        for rank in range(4):
            ops = fn(4, 8, rank, v)
            assert sorted(ops) == sorted({(k, i, c) for k in "FB" for i in range(8) for c in range(v)})
    assert pp.bubble_ratio(8, 32) == 7 / 32 and pp.bubble_ratio(8, 32, 2) == 7 / 64


def test_pipeline_on_four_ranks_matches_formulas():
    res = dist_launch.launch(pp.worker_pipeline, 4, 8, timeout=150)
    for name in pp.SCHEDULES:
        v = res[0][name]["v"]
        ref, ref_loss = pp.reference_grads(4, 8, v)
        for r in res:
            for s, gs in r[name]["grads"].items():
                assert max(float(np.abs(a - b).max()) for a, b in zip(gs, ref[s])) < 1e-12
        assert abs(res[-1][name]["loss"] - ref_loss) < 1e-12
        idle, ratio, _ = pp.measured([r[name]["timeline"] for r in res])
        assert abs(ratio - pp.bubble_ratio(4, 8, v)) < 1e-12
        assert all(abs(x - pp.idle_fraction(4, 8, v)) < 1e-12 for x in idle)
        assert [r[name]["peak"] / v for r in res] == [pp.peak_microbatches_in_flight(name, 4, 8, k, v) for k in range(4)]


# ---------- ZeRO / FSDP (code/framework/zero.py) ----------
import zero  # noqa: E402


def test_zero_calculator_matches_paper_and_index():
    tot = lambda p, n, s: sum(zero.model_state_bytes(p, n, s).values()) / 1e9
    assert [round(tot(7.5e9, 64, s), 1) for s in range(4)] == [120.0, 31.4, 16.6, 1.9]  # ZeRO paper, Figure 1
    assert [round(tot(70e9, 64, s), 1) for s in range(4)] == [1120.0, 293.1, 155.3, 17.5]
    assert [round(tot(70e9, 8, s), 1) for s in range(4)] == [1120.0, 385.0, 262.5, 140.0]
    assert zero.comm_elems_per_rank(100, 4, 3) == 1.5 * zero.comm_elems_per_rank(100, 4, 2)


def test_zero_stages_and_fsdp2_bytes_on_four_ranks():
    res = dist_launch.launch(zero.worker_zero, 4, timeout=180)
    P = res[0]["P"]
    for r in res:
        for stage in range(4):
            calc = zero.model_state_bytes(P, 4, stage, param_b=4, grad_b=4, K=8)
            assert {k: r[stage][k] for k in calc} == calc
            assert r[stage]["err"] < 1e-6
        for stage in (1, 2):
            assert r[stage]["comm"] == {"reduce_scatter": P, "all_gather": P}
        assert r[3]["type"] == "DTensor"


# ---------- memory budget (code/framework/memory_budget.py) ----------
import memory_budget as mb  # noqa: E402
import torch  # noqa: E402


def test_korthikanti_terms_and_table():
    s, b, h, a = 4096, 1, 4096, 32
    attn, mlp, ln = 11 * s * b * h + 5 * a * s * s * b, 19 * s * b * h, 4 * s * b * h  # the page's per-tensor count
    assert mb.activation_bytes_per_layer(s, b, h, a) == attn + mlp + ln == s * b * h * (34 + 5 * a * s / h)
    assert mb.activation_bytes_per_layer(s, b, h, a, t=8, sp=True) == mb.activation_bytes_per_layer(s, b, h, a) / 8
    assert mb.activation_bytes_per_layer(s, b, h, a, t=8) == s * b * h * (10 + 24 / 8 + 5 * a * s / (h * 8))
    m = mb.GPT(32, 4096, 32, 50257)
    assert round(m.params / 1e9, 2) == 6.65
    rows = {}
    for key, kw in (("none", {}), ("selective", {"recompute": "selective"}), ("full", {"recompute": "full"}),
                    ("zero3", {"recompute": "selective", "n_shard": 8, "stage": 3})):
        d = mb.step_memory(m, 4096, 1, **kw)
        rows[key] = (round(d["activations"] / 1e9, 2), round(sum(d.values()) / 1e9, 1))
    assert rows == {"none": (104.15, 212.2), "selective": (18.25, 126.3), "full": (1.07, 109.1), "zero3": (18.25, 33.2)}


def test_format_ranges_match_torch():
    r = mb.fp16_ranges()
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp8_e4m3", torch.float8_e4m3fn),
                     ("fp8_e5m2", torch.float8_e5m2)):
        fi = torch.finfo(dt)
        assert (fi.max, fi.smallest_normal) == r[name][:2]
    assert torch.tensor(2.0**-25, dtype=torch.float16).item() == 0.0  # below fp16's smallest subnormal 2^-24
    assert torch.tensor(2.0**-25, dtype=torch.bfloat16).item() != 0.0  # bf16 keeps fp32's range


# ---------- PyTorch internals (code/framework/torch_internals.py) ----------
import torch_internals as ti  # noqa: E402


def test_strides_keys_graph():
    f = ti.view_facts()
    assert f["x_stride"] == (4, 1) and f["y_stride"] == (1, 4) and f["z_stride"] == (4, 2) and f["z_offset"] == 1
    assert f["same_storage"] and not f["y_contiguous"] and f["copy_on_contiguous"]
    keys = ti.dispatch_keys(torch.randn(2))
    assert "AutogradCPU" in keys and "CPU" in keys  # autograd key present even without requires_grad
    assert ti.autograd_graph(torch.randn(3, requires_grad=True)) == ["SumBackward0", "SinBackward0", "MulBackward0", "AccumulateGrad"]


def test_custom_op_matches_silu_and_passes_opcheck():
    x = torch.randn(64, dtype=torch.float64, requires_grad=True)
    y = ti.np_silu(x)
    assert torch.allclose(y, torch.nn.functional.silu(x), atol=1e-12)
    assert torch.autograd.gradcheck(ti.np_silu, (x,))
    report = torch.library.opcheck(ti.np_silu, (torch.randn(8, requires_grad=True),))
    assert set(report.values()) == {"SUCCESS"}


# ---------- planning (code/framework/planning.py) ----------
import planning as pl  # noqa: E402


def test_planning_table():
    assert round(pl.LLAMA2_7B.params / 1e9, 2) == 6.74 and round(pl.LLAMA3_70B.params / 1e9, 2) == 70.55
    rows = {}
    for key, args in {"7b-8": (pl.LLAMA2_7B, 8, 1, 1, 1), "7b-64": (pl.LLAMA2_7B, 64, 1, 1, 1),
                      "70b-8-tp8": (pl.LLAMA3_70B, 8, 8, 1, 1), "70b-8-z3": (pl.LLAMA3_70B, 8, 1, 1, 3),
                      "70b-64-tp8pp2": (pl.LLAMA3_70B, 64, 8, 2, 1), "70b-64-tp4pp2": (pl.LLAMA3_70B, 64, 4, 2, 1),
                      "70b-64-z3": (pl.LLAMA3_70B, 64, 1, 1, 3)}.items():
        r = pl.plan(*args)
        rows[key] = (round(r["mem"]["total"] / 1e9, 1), r["fits"], round(r["t_step"], 1), round(r["mfu"], 2))
    assert rows == {"7b-8": (55.3, True, 35.5, 0.70), "7b-64": (46.5, True, 4.4, 0.70),
                    "70b-8-tp8": (152.5, False, 430.5, 0.56), "70b-8-z3": (232.4, False, 345.0, 0.70),
                    "70b-64-tp8pp2": (42.3, True, 54.0, 0.56), "70b-64-tp4pp2": (71.3, True, 48.1, 0.63),
                    "70b-64-z3": (108.9, True, 43.1, 0.70)}
    r = pl.plan(pl.LLAMA3_70B, 64, 1, 1, 3)
    assert round(r["t_dp"], 1) == 14.8 and round(r["t_tp"], 1) == 0.0
    r = pl.plan(pl.LLAMA3_70B, 64, 8, 2, 1)
    assert round(r["t_tp"], 1) == 10.7 and r["n_micro"] == 256


# ---------- expert parallelism (code/framework/moe.py) ----------
import moe  # noqa: E402


def _routing(skew, T=4096, E=64):
    torch.manual_seed(0)
    bias = -skew * torch.log(torch.arange(1, E + 1).double())
    return torch.randn(T, E, dtype=torch.float64) + bias


def test_moe_capacity_drop_matches_loop_and_page():
    logits = _routing(0.5, T=300, E=8)
    load, dropped, cap = moe.route_and_drop(logits, 2, 1.0)
    seen, drop_loop = [0] * 8, 0  # reference: walk the assignments in token order
    for row in logits.topk(2, dim=-1).indices.tolist():
        for e in row:
            seen[e] += 1
            drop_loop += seen[e] > cap
    assert cap == moe.capacity(300, 8, 2, 1.0) == 75 and dropped == drop_loop and load.tolist() == seen
    page = {}
    for skew in (0.0, 0.5):
        for f in (1.0, 1.25):
            load, dropped, cap = moe.route_and_drop(_routing(skew), 2, f)
            page[(skew, f)] = (cap, round(dropped / (4096 * 2), 3), round(moe.imbalance(load, 8), 2))
    assert page == {(0.0, 1.0): (128, 0.04, 1.08), (0.0, 1.25): (160, 0.0, 1.08),
                    (0.5, 1.0): (128, 0.458, 4.38), (0.5, 1.25): (160, 0.406, 4.38)}


def test_moe_a2a_bytes():
    b = moe.a2a_bytes_per_rank(4096, 8, 7168, 64, dispatch_bytes=1, combine_bytes=2)
    assert b["dispatch"] == 4096 * 8 * 7168 * 63 / 64 and b["combine"] == 2 * b["dispatch"]
    assert round(b["dispatch"] / 2**20, 1) == 220.5
