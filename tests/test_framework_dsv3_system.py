"""code/framework/dsv3_system.py: the pipeline-schedule simulator against Table 2 of the DeepSeek-V3 report,
node-limited routing against its closed form, and the byte and parameter counts quoted by
docs/framework/deepseek-v3-system.md."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import dsv3_system as ds  # noqa: E402
import pipeline as pl  # noqa: E402

# Table 2 holds exactly when the input-gradient backward costs as much as a forward (B - W = F) and W <= F.
COSTS = [ds.Cost(F=1, B=2, W=1, FB=2.5), ds.Cost(F=1, B=1.3, W=0.3, FB=2.0), ds.Cost(F=2, B=3.5, W=1.5, FB=4.5)]


@pytest.mark.parametrize("c", COSTS)
@pytest.mark.parametrize("p,m", [(4, 8), (4, 14), (6, 12), (8, 16), (8, 20), (10, 24)])
def test_simulated_bubble_equals_table2(c, p, m):
    for name in ("1f1b", "zb1p", "dualpipe"):
        res = ds.run_schedule(name, p, m, c)
        assert res["bubble"] == pytest.approx(ds.table2_bubble(name, p, c), abs=1e-9), name


def test_dualpipe_memory_and_independence_of_m():
    c = COSTS[0]
    for p in (4, 6, 8):
        peaks = {m: ds.run_schedule("dualpipe", p, m, c)["peak_activations"] for m in (2 * p, 2 * p + 6)}
        assert all(peak == [p + 1] * p for peak in peaks.values())        # PP + 1 on every rank, any m
        assert ds.run_schedule("1f1b", p, 2 * p, c)["peak_activations"] == [p - r for r in range(p)]
        assert max(ds.run_schedule("zb1p", p, 2 * p, c)["peak_activations"]) == p


def test_programs_do_every_chunk_once():
    p, m = 8, 20
    res = ds.run_schedule("dualpipe", p, m, COSTS[0])
    for tl in res["timeline"]:
        parts = [part for _, parts, _, _ in tl for part in parts]
        for d in (0, 1):
            assert sorted(x[2] for x in parts if x[:2] == ("F", d)) == list(range(m // 2))
            assert sorted(x[2] for x in parts if x[:2] == ("B", d)) == list(range(m // 2))
    # 1F1B here and in code/framework/pipeline.py run the same order
    prog = ds.one_f_one_b_program(1, 4, 8)
    kinds = [a[1] for a in prog if a[0] == "run"]
    assert kinds == [op for op, _, _ in pl.one_f_one_b_order(4, 8, 1)]


def test_table2_outside_its_assumption_is_only_an_estimate():
    c = ds.Cost(F=1, B=3, W=1, FB=3.5)            # B - W = 2 > F
    res = ds.run_schedule("dualpipe", 8, 16, c)
    assert res["bubble"] != pytest.approx(ds.table2_bubble("dualpipe", 8, c))
    # the page's reading of the deviation: below the formula when B - W > F and W <= F, above it when
    # B - W < F or (B - W = F and W > F); the order DualPipe <= ZB1P <= 1F1B holds throughout
    for bi in (0.5, 1.0, 1.5, 2.0):
        for w in (0.3, 1.0, 2.0):
            c = ds.Cost(F=1.0, B=bi + w, W=w, FB=max(1.0, bi + w) + 0.4)
            b = {s: ds.run_schedule(s, 8, 16, c)["bubble"] for s in ("dualpipe", "zb1p", "1f1b")}
            diff = b["dualpipe"] - ds.table2_bubble("dualpipe", 8, c)
            if bi > 1 and w <= 1:
                assert diff < -1e-9, (bi, w)
            elif bi < 1 or (bi == 1 and w > 1):
                assert diff > 1e-9, (bi, w)
            assert b["dualpipe"] <= b["zb1p"] + 1e-9 <= b["1f1b"] + 2e-9, (bi, w)


def test_model_size_matches_the_report():
    mp = ds.model_params()
    assert mp["total"] == pytest.approx(671e9, rel=0.005)
    assert mp["active"] == pytest.approx(37e9, rel=0.03)
    assert (round(mp["total"] / 1e9, 1), round(mp["active"] / 1e9, 1)) == (671.0, 37.6)   # as quoted


def test_cross_node_numbers():
    assert ds.nvlink_fanout() == {"experts_per_node": 3.2, "max_experts": 13}
    assert ds.sm_budget()["fraction"] == pytest.approx(0.1515, abs=1e-4)
    tb = ds.token_bytes()
    assert tb == {"dispatch_fp8": 7168 + 56 * 4, "dispatch_bf16": 14336, "combine_bf16": 14336}


def test_node_limited_routing_against_closed_form():
    c = ds.V3Config()
    scores = np.random.default_rng(1).standard_normal((6000, c.routed))
    free = ds.routing_stats(ds.route(scores, c, limit=False), c)
    lim = ds.routing_stats(ds.route(scores, c, limit=True), c)
    assert free["nodes"] == pytest.approx(ds.expected_distinct(8, 32, 8), abs=0.04)
    assert free["remote_nodes"] == pytest.approx(ds.expected_distinct(8, 32, 8) * 7 / 8, abs=0.05)
    assert lim["max_nodes"] == 4 and free["max_nodes"] > 4
    assert lim["remote_nodes"] < free["remote_nodes"] < free["naive_remote_copies"]
    assert free["naive_remote_copies"] == pytest.approx(8 * 7 / 8, abs=0.05)
    # the figures the page quotes (seeded run)
    assert (lim["nodes"], lim["remote_nodes"], lim["nvlink_copies"]) == pytest.approx((3.97, 3.47, 6.54), abs=0.01)
    assert lim["nvlink_copies"] * 7392 / 160e3 == pytest.approx(0.30, abs=0.01)      # microseconds per token
    assert lim["remote_nodes"] * 7392 / 50e3 == pytest.approx(0.51, abs=0.01)
    assert ds.ib_time_per_layer(4096, 4) * 1e3 == pytest.approx(7.12, abs=0.01)
    assert ds.ib_time_per_layer(4096, 7) * 1e3 == pytest.approx(12.5, abs=0.05)
    assert ds.ib_time_per_layer(4096, free["naive_remote_copies"]) * 1e3 == pytest.approx(12.5, abs=0.1)
    assert ds.ib_time_per_layer(4096, ds.expected_distinct(8, 32, 8) * 7 / 8) * 1e3 == pytest.approx(8.2, abs=0.05)
    assert ds.ib_time_per_layer(4096, lim["remote_nodes"]) * 1e3 == pytest.approx(6.2, abs=0.05)


def test_low_precision_and_memory():
    lp = ds.low_precision_savings()
    assert ds.optimizer_bytes_per_param(4) - ds.optimizer_bytes_per_param(2) == 4
    assert lp["dispatch_fraction_saved"] == pytest.approx(1 - 7392 / 14336)
    assert (lp["swiglu_bf16"], lp["swiglu_fp8"]) == (12288, 4224)
    r = ds.recompute_bytes_per_token_layer()
    assert (r["norm_elems"], r["up_elems"]) == (16384, 57344)
    assert lp["adam_bytes_saved_total"] == pytest.approx(2.68e12, rel=0.005)
    ms = ds.memory_savings()
    assert ms["recompute_per_token_layer"] == 16896 + 114688 == 131584
    assert ms["recompute_at_peak"] == pytest.approx(35e9, rel=0.01)        # one 4096-token sequence per chunk
    assert ds.per_gpu_params() == pytest.approx(1.71e9, rel=0.005)
    assert ms["ema_fp32_per_gpu"] == pytest.approx(6.8e9, rel=0.01)
    assert ms["mtp_sharing"] == 129280 * 7168 * 6 == pytest.approx(5.6e9, rel=0.01)


def test_dispatchers_and_folding():
    small = ds.dispatcher_bytes(4096, 8, 7168, ep=4)
    big = ds.dispatcher_bytes(4096, 8, 7168, ep=64, remote_nodes=3.5)
    assert small["allgather"] < small["alltoall"]                 # all-gather wins when EP < top-k
    assert big["flex_ib"] < big["alltoall"] < big["allgather"]
    assert ds.dispatcher_bytes(4096, 8, 7168, ep=8)["allgather"] == ds.dispatcher_bytes(4096, 8, 7168, ep=8)["alltoall"]
    mib = {ep: {k: v / 2**20 for k, v in ds.dispatcher_bytes(4096, 8, 7168, ep, remote_nodes=3.47).items()}
           for ep in (4, 8, 64)}                                       # the page's table
    assert [(mib[e]["allgather"], mib[e]["alltoall"]) for e in (4, 8, 64)] == [(336, 672), (784, 784), (7056, 882)]
    assert mib[64]["flex_ib"] == pytest.approx(389, abs=1)
    g = ds.folding(2048, dict(tp=1, cp=1, dp=128, pp=16), dict(etp=1, ep=64, edp=2, pp=16))
    assert g["ep"][0] == tuple(range(64)) and g["pp"] == g["pp_moe"]
    g = ds.folding(256, dict(tp=4, cp=2, dp=8, pp=4), dict(etp=1, ep=64, edp=1, pp=4))
    assert len(g["ep"]) == 4 and g["tp"][0] == (0, 1, 2, 3)
    with pytest.raises(ValueError):
        ds.folding(256, dict(tp=4, cp=2, dp=8, pp=4), dict(etp=1, ep=32, edp=1, pp=4))
    assert ds.expert_params_per_gpu(256, 58, 7168, 2048, 16, 64, 1) == pytest.approx(58 / 16 * 4 * 3 * 7168 * 2048)
    with pytest.raises(ValueError):
        ds.expert_params_per_gpu(256, 58, 7168, 2048, 16, 48, 1)
