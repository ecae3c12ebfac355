"""bench/experiments/mini_engine.py, the H200 experiment of docs/framework/mini-engine.md, run whole on the CPU
with a tiny config: the correctness gate (engine == generate(), both attention paths), the closed-loop driver,
the static-batch generate() baseline and the step breakdown produce a consistent, JSON-serialisable record."""
from __future__ import annotations

import json

import pytest
import torch

from bench.experiments import mini_engine as exp

SMALL = dict(prompt_median=12, prompt_sigma=0.6, prompt_range=(3, 30), out_median=5, out_sigma=0.5,
             out_range=(2, 10), shared_len=8, shared_frac=0.5)
LOADS = {1: 3, 4: 8}


@pytest.fixture(scope="module")
def record():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = exp.measure(torch, exp.TINY, "cpu", torch.float32, torch.float64, concurrency=list(LOADS),
                          requests=LOADS, workload_kw=SMALL, block_size=4, budget=64, check_requests=3,
                          check_tokens=4, breakdown_at=(1, 4), time_budget_s=1e9)
    finally:
        torch.set_num_threads(threads)
    return res


def test_record_is_complete_and_serialisable(record):
    json.dumps(record)
    assert set(record["check"]) >= {"per_request", "batched"}  # measure() asserted engine == generate() for both
    assert record["model"]["params"] > 0 and not record["skipped"]
    assert 0.0 <= record["bf16_greedy_agreement"] <= 1.0
    assert [(r["concurrency"], r["attention"]) for r in record["loads"]] == [
        (c, a) for c in LOADS for a in ("batched", "per_request")]


def test_loads_count_what_the_workload_asks(record):
    for c, n in LOADS.items():
        specs = exp.workload(torch, n, exp.TINY["vocab_size"], seed=100 + c, **SMALL)
        want_out = sum(m for _, m in specs)
        shared = sum(p[:SMALL["shared_len"]] == specs[0][0][:SMALL["shared_len"]] for p, _ in specs)
        rows = [r for r in record["loads"] if r["concurrency"] == c]
        for r in rows:
            assert r["requests"] == n and r["output_tokens"] == want_out
            assert r["prompt_tokens"] == sum(len(p) for p, _ in specs)
            assert r["mean_batch_tokens"] <= r["max_batch_tokens"] <= 64
            assert r["ttft_ms"]["p50"] <= r["ttft_ms"]["p99"] and r["tpot_ms"]["p50"] <= r["tpot_ms"]["p99"]
            # without preemption every prompt token is computed once unless the prefix cache had it
            if r["preemptions"] == 0:
                assert r["forward_tokens"] == sum(len(p) + m - 1 for p, m in specs) - r["prefix_hit_tokens"]
            assert r["prefix_hit_tokens"] <= shared * SMALL["shared_len"] + n * 30  # shared blocks (+ chance repeats)
        # the scheduler does not depend on the attention path: same steps, same rows
        assert len({(r["steps"], r["forward_tokens"], r["prefix_hit_tokens"]) for r in rows}) == 1
        gen = next(g for g in record["generate"] if g["batch"] == c)
        assert gen["output_tokens"] == want_out and 0.0 <= gen["padded_waste"] < 1.0
    assert sum(r["prefix_hit_tokens"] for r in record["loads"]) > 0


def test_breakdown_adds_up(record):
    assert [(b["concurrency"], b["attention"]) for b in record["breakdown"]] == [
        (c, a) for c in (1, 4) for a in ("per_request", "batched")]
    for b in record["breakdown"]:
        assert b["rows"] == b["concurrency"] and b["kernel_ms"] is None  # no profiler on the CPU
        # every request is plain greedy: the engine takes the argmax itself and never calls sample()
        assert b["schedule_ms"] >= 0 and b["forward_ms"] > 0 and b["sample_ms"] == 0
        assert b["step_ms"] >= b["forward_ms"] + b["sample_ms"]
