"""code/framework/serving_sim.py: fitted step models and the serving simulator's invariants."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
import serving_sim as ss  # noqa: E402

MODEL = ss.StepModel(c=(2.0, 0.01, 1e-5), p=(1.5, 0.005, 3e-7))


def _synthetic(c, p):
    dec = [{"batch": b, "context": s, "median_ms": c[0] + c[1] * b + c[2] * b * s}
           for s in (512, 2048, 8192) for b in (1, 4, 16, 64)]
    pre = [{"batch": b, "tokens": t, "median_ms": p[0] + p[1] * b * t + p[2] * b * t * t / 2}
           for b, t in ((1, 128), (1, 1024), (1, 4096), (4, 512))]
    chunk = [{"chunk": n, "prefix": q, "median_ms": p[0] + p[1] * n + p[2] * n * (q + n / 2)}
             for n, q in ((512, 512), (512, 6144), (2048, 2048))]
    return {"decode": dec, "prefill": pre, "chunked_prefill": chunk}


def test_fit_recovers_known_coefficients():
    model, rep = ss.fit_record(_synthetic(MODEL.c, MODEL.p))
    np.testing.assert_allclose(model.c, MODEL.c, rtol=1e-8)
    np.testing.assert_allclose(model.p, MODEL.p, rtol=1e-6)
    assert np.abs(rep["decode_residual_ms"]).max() < 1e-9


def test_fit_of_the_h200_record_is_within_15_percent():
    rec = json.loads((ROOT / "data/records/nvidia-h200/serving_step_times.json").read_text())
    model, rep = ss.fit_record(rec["results"])
    assert np.abs(rep["decode_rel"]).max() < 0.15 and np.abs(rep["prefill_rel"]).max() < 0.15
    # the KV term per token equals the record's bytes per token over an effective bandwidth of 1-5 TB/s
    gbps = rec["results"]["model"]["kv_bytes_per_token"] / (model.c[2] * 1e-3) / 1e9
    assert 1000 < gbps < 5000


def _two(prompts=(100, 300), outputs=(3, 5), arrivals=(0.0, 0.0)):
    return [ss.Request(i, a, p, o) for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))]


def test_single_request_alone_matches_the_step_model_exactly():
    for cfg in (ss.Config(policy="continuous"), ss.Config(policy="chunked", chunk_budget=512),
                ss.Config(policy="chunked", reserve=False)):
        r = ss.Request(0, 5.0, 200, 6)
        ss.simulate([r], MODEL, cfg)
        assert r.emitted[0] - r.arrival == pytest.approx(MODEL.prefill_ms(200, 200 * 100))
        gaps = np.diff(r.emitted)
        np.testing.assert_allclose(gaps, [MODEL.decode_ms(1, 200 + i) for i in range(5)])


def test_two_requests_static_by_hand():
    reqs = _two()
    ss.simulate(reqs, MODEL, ss.Config(policy="static", static_batch=2))
    t = MODEL.prefill_ms(400, 100 * 50 + 300 * 150)
    assert reqs[0].emitted[0] == pytest.approx(t) and reqs[1].emitted[0] == pytest.approx(t)
    ctx = 400  # both rows decode (a finished row stays as padding) until the longest is done
    for k in range(4):
        t += MODEL.decode_ms(2, ctx)
        ctx += 2 if k < 2 else 1
        assert reqs[1].emitted[k + 1] == pytest.approx(t)
    assert reqs[0].emitted[-1] < reqs[1].emitted[-1]


def test_two_requests_continuous_by_hand():
    reqs = _two(arrivals=(0.0, 1.0))
    ss.simulate(reqs, MODEL, ss.Config(policy="continuous"))
    t = MODEL.prefill_ms(100, 100 * 50)  # only the first has arrived at t=0
    assert reqs[0].emitted[0] == pytest.approx(t)
    t += MODEL.prefill_ms(300, 300 * 150)  # prefill-first: the second is admitted at the next step
    assert reqs[1].emitted[0] == pytest.approx(t)
    t += MODEL.decode_ms(2, 100 + 300)  # then both decode; each cache holds its prompt
    assert reqs[0].emitted[1] == pytest.approx(t) and reqs[1].emitted[1] == pytest.approx(t)


@pytest.mark.parametrize("policy,reserve", [("static", True), ("continuous", True), ("chunked", True),
                                            ("chunked", False)])
def test_conservation_and_kv_bound(policy, reserve):
    cfg = ss.Config(policy=policy, reserve=reserve, kv_tokens=12000)
    reqs = ss.workload(60, rate=200, seed=1)
    res = ss.simulate(reqs, MODEL, cfg)
    assert all(len(r.emitted) == r.output for r in reqs)
    assert all(np.all(np.diff(r.emitted) > 0) and r.emitted[0] > r.arrival for r in reqs)
    assert max(s["kv_used"] for s in res["steps"]) <= cfg.kv_tokens
    for _, _, grow, free in res["preemptions"]:
        assert grow > free  # preempted only when the cache could not hold the step's new tokens
    if reserve:
        assert not res["preemptions"]
    else:
        assert res["preemptions"] and any(r.preemptions for r in reqs)


def test_chunked_budget_is_respected():
    res = ss.simulate(ss.workload(40, rate=300, seed=2), MODEL, ss.Config(policy="chunked", chunk_budget=256))
    assert max(s["decode"] + s["prefill_tokens"] for s in res["steps"]) <= 256
