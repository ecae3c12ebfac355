"""Step-time models fitted to H200 records and a discrete-event simulator of one serving engine.

Used by docs/framework/llm-inference.md and notebooks/framework/serving-scheduler-lab.ipynb.
Times are in milliseconds, lengths in tokens.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np



# --8<-- [start:fit]
@dataclass(frozen=True)
class StepModel:
    """decode_ms = c0 + c1*B + c2*sum(ctx);  prefill_ms = p0 + p1*N + p2*sum(n*(prefix + n/2))."""

    c: tuple[float, float, float]
    p: tuple[float, float, float]

    def decode_ms(self, batch: int, context_sum: float) -> float:
        """One decode step of `batch` sequences whose cached contexts add up to `context_sum`."""
        if batch == 0:
            return 0.0
        return self.c[0] + self.c[1] * batch + self.c[2] * context_sum

    def prefill_ms(self, tokens: float, attn: float) -> float:
        """A prefill step of `tokens` new tokens; attn = sum over chunks of n*(prefix + n/2)."""
        return self.p[0] + self.p[1] * tokens + self.p[2] * attn

    def step_ms(self, decode_batch: int, context_sum: float, chunks: list[tuple[int, int]]) -> float:
        """A step of decode tokens and prefill chunks (n, prefix); the fixed cost is paid once."""
        if not chunks:
            return self.decode_ms(decode_batch, context_sum)
        n = sum(c for c, _ in chunks)
        attn = sum(c * (pre + c / 2) for c, pre in chunks)
        return self.prefill_ms(n, attn) + self.c[1] * decode_batch + self.c[2] * context_sum


def lstsq(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ordinary least squares; returns (coefficients, residuals y - x @ coef)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return coef, y - x @ coef


def decode_design(batch, context) -> np.ndarray:
    b, s = np.asarray(batch, float), np.asarray(context, float)
    return np.column_stack([np.ones_like(b), b, b * s])


def prefill_design(tokens, prefix, batch=None) -> np.ndarray:
    """Rows for a batch of `batch` equal sequences of `tokens` new tokens after `prefix` cached ones."""
    t, pre = np.asarray(tokens, float), np.asarray(prefix, float)
    b = np.ones_like(t) if batch is None else np.asarray(batch, float)
    return np.column_stack([np.ones_like(t), b * t, b * t * (pre + t / 2)])


def fit_record(results: dict) -> tuple[StepModel, dict]:
    """Fit both step models to the `results` of serving_step_times.json; report residuals."""
    dec = results["decode"]
    xd = decode_design([r["batch"] for r in dec], [r["context"] for r in dec])
    yd = np.array([r["median_ms"] for r in dec])
    c, rd = lstsq(xd, yd)
    pre = results["prefill"] + results["chunked_prefill"]
    xp = prefill_design([r.get("tokens", r.get("chunk")) for r in pre], [r.get("prefix", 0) for r in pre],
                        [r.get("batch", 1) for r in pre])
    yp = np.array([r["median_ms"] for r in pre])
    p, rp = lstsq(xp, yp)
    report = {"decode_residual_ms": rd, "decode_rel": rd / yd, "prefill_residual_ms": rp, "prefill_rel": rp / yp}
    return StepModel(tuple(map(float, c)), tuple(map(float, p))), report
# --8<-- [end:fit]


@dataclass
class Request:
    rid: int
    arrival: float
    prompt: int
    output: int
    computed: int = 0  # tokens whose KV is in the cache
    emitted: list = field(default_factory=list)  # time of each output token
    kv: int = 0  # tokens of KV cache held (or reserved)
    preemptions: int = 0

    @property
    def need(self) -> int:
        """Tokens to prefill before the next token can be sampled (prompt + outputs so far)."""
        return self.prompt + len(self.emitted)

    @property
    def done(self) -> bool:
        return len(self.emitted) == self.output


@dataclass
class Config:
    policy: str = "continuous"  # static | continuous | chunked
    kv_tokens: int = 65536  # KV-cache capacity in tokens
    reserve: bool = True  # reserve prompt + max_tokens at admission; False: allocate as computed, preempt
    max_tokens: int = 512  # the output cap that a reservation must cover
    static_batch: int = 32
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192  # prefill tokens per step (continuous); the step's budget (chunked)
    chunk_budget: int = 512  # chunked: decode tokens + prefill tokens per step


def workload(n: int, rate: float, seed: int, prompt_median=512, output_median=128, max_tokens=512,
             max_prompt=4096):
    """Poisson arrivals (rate per second) with log-normal prompt and output lengths (sigma 0.8)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1000.0 / rate, n))  # ms
    prompt = np.clip(np.rint(rng.lognormal(np.log(prompt_median), 0.8, n)), 16, max_prompt).astype(int)
    output = np.clip(np.rint(rng.lognormal(np.log(output_median), 0.8, n)), 2, max_tokens).astype(int)
    return [Request(i, float(a), int(p), int(o)) for i, (a, p, o) in enumerate(zip(arrivals, prompt, output))]


# --8<-- [start:sim]
def simulate(requests: list[Request], model: StepModel, cfg: Config) -> dict:
    """Run the engine until every request has emitted its output; returns requests and a step log."""
    pending = deque(sorted(requests, key=lambda r: r.arrival))
    waiting: deque[Request] = deque()
    running: list[Request] = []  # admission order: running[-1] is the newest (vLLM preempts it first)
    free = cfg.kv_tokens
    t, steps, preempt_log = 0.0, [], []

    def arrive(now):
        while pending and pending[0].arrival <= now:
            waiting.append(pending.popleft())

    def kv_need(r: Request) -> int:
        return r.prompt + cfg.max_tokens if cfg.reserve else 0

    def emit(r: Request, now: float):
        nonlocal free
        r.emitted.append(now)
        if r.done and cfg.policy != "static":
            running.remove(r)
            free += r.kv
            r.kv = 0

    while pending or waiting or running:
        arrive(t)
        decode, chunks = [], []  # chunks: (request, n new tokens, prefix)
        if cfg.policy == "static":
            if not running:
                full = len(waiting) >= cfg.static_batch or not pending
                while full and waiting and len(running) < cfg.static_batch and kv_need(waiting[0]) <= free:
                    r = waiting.popleft()
                    r.kv = kv_need(r)
                    free -= r.kv
                    running.append(r)
                    chunks.append((r, r.prompt, 0))
            if not chunks:
                decode = [r for r in running if not r.done]
        elif cfg.policy == "continuous":
            budget = cfg.max_batched_tokens
            while waiting and len(running) < cfg.max_num_seqs:
                r = waiting[0]
                need = kv_need(r) if cfg.reserve else r.need
                if need > free or (chunks and r.need > budget):
                    break
                waiting.popleft()
                r.kv, free = need, free - need
                running.append(r)
                chunks.append((r, r.need, 0))
                budget -= r.need
            if not chunks:
                decode = list(running)
        else:  # chunked: decodes first, then prefill chunks, within a token budget (vLLM v1 order)
            budget, preempted = cfg.chunk_budget, False
            i = 0
            while i < len(running) and budget > 0:
                r = running[i]
                n = min(r.need - r.computed, budget)  # 1 for a decode (need - computed == 1 once emitting)
                grow = 0 if cfg.reserve else n
                while grow > free:  # out of KV: preempt the newest running request, recompute later
                    v = running.pop()
                    preempt_log.append((t, v.rid, grow, free))
                    free += v.kv
                    v.kv, v.computed, v.preemptions = 0, 0, v.preemptions + 1
                    decode = [x for x in decode if x is not v]
                    chunks = [c for c in chunks if c[0] is not v]
                    waiting.appendleft(v)
                    preempted = True
                    if v is r:
                        break
                if r not in running:
                    break
                free -= grow
                r.kv += grow
                if r.emitted and r.need - r.computed == 1:
                    decode.append(r)
                else:
                    chunks.append((r, n, r.computed))
                budget -= n
                i += 1
            while not preempted and waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                r = waiting[0]
                n = min(r.need, budget)
                need = kv_need(r) if cfg.reserve else n
                if need > free:
                    break
                waiting.popleft()
                r.kv, free = need, free - need
                running.append(r)
                chunks.append((r, n, 0))
                budget -= n
        if not decode and not chunks:
            if not pending:
                raise RuntimeError("deadlock: requests wait but none can be admitted")
            t = max(t, pending[0].arrival)
            continue
        if cfg.policy == "static" and decode:  # a static batch keeps its finished rows as padding
            dt = model.decode_ms(len(running), sum(r.computed for r in running))
        else:
            dt = model.step_ms(len(decode), sum(r.computed for r in decode), [(n, p) for _, n, p in chunks])
        t += dt
        steps.append({"t": t, "ms": dt, "decode": len(decode), "prefill_tokens": sum(c[1] for c in chunks),
                      "kv_used": cfg.kv_tokens - free})
        for r, n, _ in chunks:
            r.computed += n
            if r.computed == r.need:
                emit(r, t)
        for r in decode:
            r.computed += 1
            emit(r, t)
        assert free >= 0, "KV cache over-committed"
        if cfg.policy == "static" and all(r.done for r in running):
            for r in list(running):
                free += r.kv
                r.kv = 0
            running.clear()
    return {"requests": requests, "steps": steps, "preemptions": preempt_log}
# --8<-- [end:sim]


# --8<-- [start:metrics]
def metrics(result: dict, slo_ttft_ms: float = 200.0, slo_tpot_ms: float = 5.0) -> dict:
    """TTFT, TPOT, end-to-end percentiles; output tokens/s; goodput (requests/s meeting both SLOs)."""
    reqs = result["requests"]
    ttft = np.array([r.emitted[0] - r.arrival for r in reqs])
    tpot = np.array([(r.emitted[-1] - r.emitted[0]) / (r.output - 1) for r in reqs])
    e2e = np.array([r.emitted[-1] - r.arrival for r in reqs])
    span_s = (max(r.emitted[-1] for r in reqs) - min(r.arrival for r in reqs)) / 1000
    out = {"throughput_tok_s": sum(r.output for r in reqs) / span_s,
           "goodput_req_s": float(np.sum((ttft <= slo_ttft_ms) & (tpot <= slo_tpot_ms))) / span_s,
           "preemptions": len(result["preemptions"])}
    for name, v in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = float(np.percentile(v, q))
    return out
# --8<-- [end:metrics]
