"""code/framework/dtensor_demo.py (docs/framework/dtensor-composable.md): DTensor placements and the
collectives redistribute inserts, TP + FSDP2 on a 2-D mesh equal to one process, meta-device init from
a seed checkpoint, the async-TP ring decomposition, the overlap inequalities with the H200 figures,
Adam with bf16 moments, and the pipeline partitioner against brute force."""
from __future__ import annotations

import random
import sys

import pytest
import torch
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import dist_launch  # noqa: E402
import dtensor_demo as dd  # noqa: E402

H200 = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]["nvidia-h200"]
F = H200["bf16_tensor_dense_tflops"] * 1e12
NVLINK = H200["nvlink_bandwidth_gbps"] / 2 * 1e9   # one direction
IB = 50e9                                          # one 400 Gb/s NIC per GPU (assumption stated on the page)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("seed") / "seed.pt"
    torch.save(dd.seed_state_dict(), path)
    return dist_launch.launch(dd.worker_all, 4, str(path), timeout=120)


def test_placements_and_the_collective_each_redistribute_inserts(ranks):
    for r in ranks:
        p = r["placements"]
        assert p["matmul"] == ("(Partial(sum),)", {}, [8, 12])   # Shard(1) @ Shard(0): local GEMM, partial sum
        assert p["partial placement is Partial"]
        assert p["partial->replicate"][0] == {"all_reduce": 1} and p["partial->replicate"][1] < 1e-12
        assert p["partial->shard0"][0] == {"reduce_scatter_tensor": 1} and p["partial->shard0"][1] < 1e-12
        assert p["shard1->replicate"] == {"all_gather_into_tensor": 1}
        assert p["replicate->shard0"] == {}
        assert p["rowwise matmul"] == ("(Shard(dim=0),)", {})


def test_tp_plus_fsdp2_on_a_2d_mesh_equals_one_process(ranks):
    for r in ranks:
        assert r["2d_loss_err"] < 1e-12 and r["2d_grad_err"] < 1e-12 and r["2d_param_err"] < 1e-12
        pl = r["2d_placements"]
        assert pl["mesh"] == "[[0, 1], [2, 3]]"
        assert pl["w1.weight"] == "(_StridedShard(dim=0, sf=2), Shard(dim=0))"   # FSDP on top of colwise
        assert pl["w2.weight"] == "(Shard(dim=0), Shard(dim=1))"                  # FSDP dim 0, rowwise dim 1
        assert pl["local_shape"] == [4 * dd.H // 4, dd.H]


def test_meta_init_from_a_seed_checkpoint_is_mesh_independent(ranks):
    total = ranks[0]["meta_total_numel"]
    assert total == dd.LAYERS * (2 * 4 * dd.H * dd.H + 4 * dd.H + dd.H)
    for r in ranks:
        assert r["meta_1d_equals_2d"] and r["meta_equals_seed"]
        assert r["meta_local_numel"]["1d"] == total // 4
        # 2-D: w2.bias is replicated across tp, so it is split only 2 ways
        assert r["meta_local_numel"]["2d"] == total // 4 + dd.LAYERS * (dd.H // 2 - dd.H // 4)
        assert r["naive_repeats_blocks"]


def test_async_tp_decomposition_equals_the_fused_collective(ranks):
    for r in ranks:
        a = r["async_tp"]
        assert a["ag_vs_fused"] < 1e-12 and a["ag_vs_serial"] < 1e-12
        assert a["rs_vs_fused"] < 1e-12 and a["rs_vs_serial"] < 1e-12


def test_async_tp_ideal_time():
    rng = random.Random(0)
    for _ in range(200):
        t, comp, comm = rng.randint(2, 16), rng.uniform(0.1, 5), rng.uniform(0.1, 5)
        assert dd.async_tp_time(comp, comm, t) == pytest.approx(dd.async_tp_time_closed(comp, comm, t))
    assert dd.async_tp_time(1.0, 0.5, 4) == pytest.approx(1.0)           # comm hidden: only compute
    assert dd.async_tp_time(1.0, 3.0, 4) == pytest.approx(3.25)          # comm-bound: comm + one chunk


def test_symmetric_memory_is_gpu_only():
    assert "does not support device type cpu" in dd.symm_mem_on_cpu()


def test_overlap_inequalities_with_h200_figures():
    assert F == 989.5e12 and NVLINK == 450e9
    # FSDP: the threshold in tokens per GPU per micro-batch does not depend on h
    comm, comp, tok = dd.fsdp_layer(8192, 4096, 8, F, NVLINK)
    assert round(tok) == 1924 and comm < comp
    comm, comp, tok = dd.fsdp_layer(8192, 4096, 64, F, IB)
    assert round(tok) == 19481 and comm / comp == pytest.approx(4.756, rel=1e-3)
    assert dd.fsdp_layer(4096, 4096, 64, F, IB)[2] == tok
    # TP: comm/comp = (t-1) F / (3 h B), independent of the tokens
    comm, comp, h_min = dd.tp_layer(8192, 4096, 8, F, NVLINK)
    assert round(h_min) == 5131 and comm / comp == pytest.approx(5131 / 8192, rel=1e-3)
    assert dd.tp_layer(8192, 1024, 8, F, NVLINK)[0] / dd.tp_layer(8192, 1024, 8, F, NVLINK)[1] == pytest.approx(comm / comp)
    comm4, comp4, _ = dd.tp_layer(4096, 4096, 8, F, NVLINK)
    assert comm4 / comp4 == pytest.approx(1.2526, rel=1e-3)
    assert dd.tp_layer(8192, 4096, 8, F, IB)[0] / dd.tp_layer(8192, 4096, 8, F, IB)[1] == pytest.approx(5.637, rel=1e-3)
    # PP: one activation per micro-batch against a whole stage of layers
    comm, comp, _ = dd.pp_stage(8192, 4096, 10, F, IB)
    assert comm / comp == pytest.approx(0.0201, rel=1e-2)


def test_bf16_moments_track_fp32_adam_and_halve_the_state():
    w32, l32 = dd.regression(moments="fp32")
    w16, l16 = dd.regression(moments="bf16")
    assert (w32 - w16).abs().max().item() < 5e-3
    assert l16[-1] < 1.1 * l32[-1] and l16[-1] < 1e-3 * l16[0]
    assert dd.state_bytes_per_param() == 16 and dd.state_bytes_per_param(moment=2) == 12
    assert dd.state_bytes_per_param(weight16=2, grad=2) == 16                # bf16 mixed precision, fp32 m, v
    assert dd.state_bytes_per_param(weight16=2, grad=2, moment=2) == 12
    # why bf16 and not fp16: v = g^2 underflows in fp16 for small gradients
    g = torch.tensor(1e-4)
    assert (g * g).half().item() == 0.0                                       # below half the smallest fp16 subnormal
    assert (g * g).bfloat16().item() == pytest.approx(1e-8, rel=1e-2)


def test_partitioner_equals_brute_force():
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(2, 10)
        p = rng.randint(1, n)
        costs = [rng.uniform(0, 3) for _ in range(n)]
        best, bounds = dd.partition(costs, p)
        assert best == pytest.approx(dd.partition_brute(costs, p))
        assert len(bounds) == p and bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(a < b for a, b in bounds)
        assert max(sum(costs[a:b]) for a, b in bounds) == pytest.approx(best)


def test_llama3_8b_layout():
    c = dd.layer_costs(32, 4096, 4096, 128256)
    assert c[-1] / c[1] == pytest.approx(2.2366, rel=1e-4)                    # head + loss = 2.24 layers
    best, bounds = dd.partition(c, 4)
    assert dd.layout_string(bounds, len(c)) == "E" + "t" * 8 + "|" + "t" * 9 + "|" + "t" * 9 + "|" + "t" * 6 + "L"
    mean = sum(c) / 4
    assert best / mean == pytest.approx(1.0512, rel=1e-3)
    assert dd.uniform_layers(32, 4, 4096, 4096, 128256) / mean == pytest.approx(1.1960, rel=1e-3)


def test_async_tp_on_the_page_sizes():
    comm, comp, _ = dd.tp_layer(8192, 4096, 8, F, NVLINK)
    assert dd.async_tp_time(comp, comm, 8) == pytest.approx(comp)                 # fully hidden
    assert (comm + comp) * 1e3 == pytest.approx(1.355, abs=1e-3) and comp * 1e3 == pytest.approx(0.833, abs=1e-3)
    comm, comp, _ = dd.tp_layer(4096, 4096, 8, F, NVLINK)
    assert dd.async_tp_time(comp, comm, 8) * 1e3 == pytest.approx(0.287, abs=1e-3)
    assert (comm + comp) * 1e3 == pytest.approx(0.469, abs=1e-3)


def test_async_tp_per_gemm_is_stricter_than_the_layer_total():
    # the four collectives of a layer move the same bytes as the two all-reduces of tp_layer
    for h in (4096, 8192):
        comm, comp, _ = dd.tp_layer(h, 4096, 8, F, NVLINK)
        total, per = dd.async_tp_layer_time(h, 4096, 8, F, NVLINK)
        assert total >= dd.async_tp_time_closed(comp, comm, 8) - 1e-15
        assert dd.async_tp_layer_time(h, 4096, 8, F, NVLINK / 1e6)[0] == pytest.approx(comm * 1e6 + comp / 8, rel=1e-9)
    total, per = dd.async_tp_layer_time(8192, 4096, 8, F, NVLINK)
    assert total * 1e3 == pytest.approx(0.903, abs=1e-3)                  # page: 0.903 ms, not 0.833
    assert per["o"] * 1e3 == pytest.approx(0.139, abs=1e-3)               # the exposed pair
    assert all(per[k] == pytest.approx(2 * p * 8192**2 * 4096 / 8 / F) for k, p in (("qkv", 3), ("w1", 4), ("w2", 4)))
    assert dd.async_tp_layer_time(4096, 4096, 8, F, NVLINK)[0] * 1e3 == pytest.approx(0.287, abs=1e-3)
    # the output projection's pair hides only when h >= t F / B
    assert round(8 * F / NVLINK) == 17591
    assert dd.async_tp_layer_time(17600, 4096, 8, F, NVLINK)[1]["o"] == pytest.approx(2 * 17600**2 * 4096 / 8 / F)


def test_overlap_table_on_the_page():
    rows = {                                                    # (comm ms, comp ms) as printed on the page
        "fsdp8": (dd.fsdp_layer(8192, 4096, 8, F, NVLINK), (3.13, 6.67)),
        "fsdp64": (dd.fsdp_layer(8192, 4096, 64, F, IB), (31.7, 6.67)),
        "tp8": (dd.tp_layer(8192, 4096, 8, F, NVLINK), (0.522, 0.833)),
        "tp8h4096": (dd.tp_layer(4096, 4096, 8, F, NVLINK), (0.261, 0.208)),
        "tp8ib": (dd.tp_layer(8192, 4096, 8, F, IB), (4.70, 0.833)),
        "pp": (dd.pp_stage(8192, 4096, 10, F, IB), (1.34, 66.7)),
    }
    for name, ((comm, comp, _), (c_ms, p_ms)) in rows.items():
        assert comm * 1e3 == pytest.approx(c_ms, rel=5e-3), name
        assert comp * 1e3 == pytest.approx(p_ms, rel=5e-3), name
    assert dd.fsdp_layer(8192, 4096, 8, F, NVLINK)[0] / dd.fsdp_layer(8192, 4096, 8, F, NVLINK)[1] == pytest.approx(0.47, abs=5e-3)
    assert F / NVLINK == pytest.approx(2199, abs=1) and F / IB == pytest.approx(19790, abs=1)
