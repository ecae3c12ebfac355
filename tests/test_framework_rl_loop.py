"""code/framework/rl_loop.py: the miniature RL system (a GRPO trainer and a separate generation worker on two
gloo ranks, weights broadcast after every update), the GRPO advantage and the decoupled loss, and the cost
models and numbers quoted by docs/framework/rl-systems.md."""
from __future__ import annotations

import json
import statistics
import sys

import pytest
import torch
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
sys.path.insert(0, str(ROOT / "code" / "algorithm"))
import lora_dpo  # noqa: E402
import rl_loop as rl  # noqa: E402

PSI = 7e9                                   # the page's example: a 7B model on 8 H200
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2         # K and V, 32 layers, 8 KV heads of 128, bf16: 128 KiB
H200 = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text())["gpus"]["nvidia-h200"]
NVLINK_ONE_WAY = H200["nvlink_bandwidth_gbps"] / 2


def test_param_count_formula_and_sync_bytes():
    cfg = rl.Config()
    policy = rl.make_policy(cfg)
    n = sum(p.numel() for p in policy.parameters())
    assert n == rl.param_count(cfg) == 7942
    buckets = rl.flat_buckets(list(policy.parameters()), cfg.bucket_bytes)
    assert sum(p.numel() for b in buckets for p in b) == n
    assert len(buckets) == 4                                  # 4096-byte buckets of bf16
    assert all(sum(p.numel() for p in b) * 2 <= cfg.bucket_bytes or len(b) == 1 for b in buckets)


def test_grpo_advantage_matches_a_direct_computation():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 5, (6 * 4,), generator=g).float() / 4
    adv = rl.grpo_advantages(rewards, 4)
    for i in range(6):
        grp = rewards[4 * i:4 * i + 4].tolist()
        mu, sd = statistics.mean(grp), statistics.stdev(grp)
        for j, r in enumerate(grp):
            assert adv[4 * i + j].item() == pytest.approx((r - mu) / (sd + 1e-6), abs=1e-5)
    assert torch.allclose(adv, lora_dpo.grpo_advantages(rewards.reshape(6, 4)).reshape(-1), atol=1e-6)


def test_decoupled_loss_reduces_to_ppo_clip_on_fresh_data_and_caps_the_weight():
    g = torch.Generator().manual_seed(1)
    logp = torch.randn(8, 4, generator=g) - 2
    prox = logp.detach() + 0.3 * torch.randn(8, 4, generator=g)
    adv = torch.randn(8, generator=g)
    loss, iw = rl.policy_loss(logp, prox, prox, adv, 0.2, 2.0)
    assert torch.all(iw == 1)
    ratio = torch.exp(logp - prox)
    ppo = -torch.minimum(ratio * adv[:, None], ratio.clamp(0.8, 1.2) * adv[:, None]).mean()
    assert loss.item() == pytest.approx(ppo.item(), rel=1e-6)
    _, iw = rl.policy_loss(logp, prox, prox - 3.0, adv, 0.2, 2.0)   # behaviour far older: weight e^3, capped
    assert torch.all(iw == 2.0)


def test_checker():
    prompts = torch.tensor([[3, 1, 2, 0]])
    assert rl.checker(prompts, torch.tensor([[0, 1, 2, 3]])).item() == 1.0
    assert rl.checker(prompts, torch.tensor([[0, 1, 3, 2]])).item() == 0.5


def test_sync_and_one_step_off_protocols():
    """The mechanism on a short run (learning to reward 0.8 in 60 iterations is the lab's assertion, and
    a dead worker being noticed at once is asserted by the lab and by tests/test_dist_launch.py)."""
    iters = 8
    (sync, sync_w), (asy, asy_w) = rl.run([rl.Config(lag=0, lr=1e-2, iters=iters),
                                           rl.Config(lag=1, lr=1e-2, iters=iters)], timeout=90)
    for tr, w in ((sync, sync_w), (asy, asy_w)):
        assert len(tr["reward"]) == iters
        assert all(s["bytes"] == 2 * rl.param_count(rl.Config()) for s in tr["sync"] + w["sync"])
        assert len(tr["sync"]) == len(w["sync"]) == iters          # v_0 and one after each update but the last
    assert sync["staleness"] == [0] * iters
    assert asy["staleness"] == [0] + [1] * (iters - 1)             # batch k+1 is made with v_k
    assert max(sync["iw_max"]) < 1.1                             # only bf16 rounding separates the two copies
    assert min(asy["iw_max"][1:]) > 1.1                          # one version of lag is a real policy gap


def _gen(n_gpus, responses=512):
    return rl.rollout_vs_train_s(rl.response_lengths(responses // n_gpus, 4096, 16384), PSI, 512,
                                 KV_PER_TOKEN, H200["memory_bandwidth_gbps"] * 1e9,
                                 H200["bf16_tensor_dense_tflops"] * 1e12)


def test_generation_dominates_the_iteration():
    r = _gen(8)
    assert round(r["gen_s"]) == 78 and round(r["train_s"]) == 46
    assert round(100 * r["gen_share"]) == 63
    assert round(r["mean_batch"], 1) == 15.7                     # of 64 responses started
    assert r["tail_steps"] == 10575 and r["steps"] == 16384
    assert r["peak_kv_gb"] < 141 - 14 - 10                       # the batch fits the KV budget


def test_placement_memory_and_time_for_7b_on_8_gpus():
    m = rl.placement_memory_gb(PSI, 8, 4, 1, H200["memory_gb"])
    assert m["colocated"]["static"] == pytest.approx(29.75) and m["colocated"]["kv"] == pytest.approx(101.25)
    assert m["colocated_offload"]["train_phase"] == pytest.approx(15.75)
    assert m["colocated_offload"]["kv"] == pytest.approx(117.0)
    assert m["disaggregated"]["train_gpu"] == pytest.approx(31.5)
    rec = json.loads((ROOT / "data" / "records" / "nvidia-h200" / "host_device_bandwidth.json").read_text())
    pinned = min(max(x["gbps"] for x in rec["results"]["modes"]["pinned"][d]) for d in ("d2h", "h2d"))
    switch = 2 * m["colocated_offload"]["host_bytes_per_switch_gb"] / pinned
    assert round(switch, 1) == 0.6
    sync = rl.weight_sync_cost(PSI, 2, NVLINK_ONE_WAY)["disaggregated_s"]
    t = rl.placement_time(lambda n: _gen(n)["gen_s"], _gen(8)["train_s"], 8, 4, switch_s=switch, sync_s=sync)
    assert round(t["colocated"]["t"]) == 124 and t["colocated"]["idle"] < 0.01
    assert round(t["disaggregated_sync"]["t"]) == 199 and round(100 * t["disaggregated_sync"]["idle"]) == 50
    assert round(t["disaggregated_async"]["t"]) == 108 and round(100 * t["disaggregated_async"]["idle"]) == 8
    assert round(_gen(4)["gen_s"]) == 108 and round(_gen(4)["peak_kv_gb"], 1) == 28.9


def test_weight_sync_bytes_and_time_at_nvlink_bandwidth():
    assert NVLINK_ONE_WAY == 450
    c = rl.weight_sync_cost(PSI, 2, NVLINK_ONE_WAY, train_split=8, tp_gen=1)
    assert c["total_bytes"] == 14e9
    assert round(1e3 * c["disaggregated_s"], 1) == 31.1
    assert c["colocated_gather_bytes"] == pytest.approx(12.25e9)     # 7/8 of the model still has to move
    c2 = rl.weight_sync_cost(PSI, 2, NVLINK_ONE_WAY, train_split=8, tp_gen=2)
    assert c2["per_engine_gpu_bytes"] == 7e9 and c2["colocated_gather_bytes"] == pytest.approx(5.25e9)
