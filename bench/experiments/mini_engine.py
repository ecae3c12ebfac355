"""The mini engine of docs/framework/mini-engine.md on one GPU: throughput and latency under closed-loop load,
against transformers' generate() with static padded batches on the same model, and where one step's time goes.

Model: a Llama-shaped decoder built from a transformers config with random weights (no download): hidden 2048,
16 layers, 16 query / 8 KV heads, vocabulary 32000, bf16 (0.89 B parameters). Workload: prompt and output lengths
from a fixed-seed log-normal distribution, half of the requests starting with the same 256-token system prompt
(the prefix cache hits it). Loads: closed-loop concurrency 1, 4, 16, 64 (a new request enters as soon as one
finishes), for both attention paths of the engine (one call per request, or one padded SDPA call per layer).

Before any timing the experiment checks that the engine's greedy tokens equal generate()'s, in float64 on the
GPU (as tests/test_framework_mini_engine.py does on the CPU). `measure(...)` is the whole experiment with its
sizes as arguments; tests/test_bench_mini_engine.py runs it on the CPU with a tiny config.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from collections import deque
from pathlib import Path

TITLE = "小引擎（mini_engine.py）在 H200 上的吞吐与延迟：闭环并发 1/4/16/64，对照 transformers generate() 静态批，及一步的时间分解"
USED_BY = ["docs/framework/mini-engine.md"]

BIG = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
           num_attention_heads=16, num_key_value_heads=8)
TINY = dict(vocab_size=200, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2)
CONCURRENCY = [1, 4, 16, 64]
REQUESTS = {1: 4, 4: 12, 16: 32, 64: 96}  # requests per load: every load runs several "generations" of requests
GPU_WORKLOAD = dict(prompt_median=192, prompt_sigma=0.6, prompt_range=(16, 768), out_median=64, out_sigma=0.5,
                    out_range=(8, 192), shared_len=256, shared_frac=0.5)
TIME_BUDGET_S = 240  # loads not started by then are recorded as skipped: the whole run stays under 5 minutes


def _engine_mod():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "framework"))
    import mini_engine
    return mini_engine


def make_model(torch, shape: dict, device: str, dtype, seed: int = 0):
    """A random-weight LlamaForCausalLM made directly on `device` (no weights downloaded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**shape, max_position_embeddings=4096, initializer_range=0.02, bos_token_id=None,
                      eos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def workload(torch, n: int, vocab: int, seed: int, prompt_median: float, prompt_sigma: float, prompt_range,
             out_median: float, out_sigma: float, out_range, shared_len: int, shared_frac: float):
    """n requests: (prompt tokens, max_tokens). Lengths are log-normal (median, sigma of the log), clipped to
    the ranges; a fraction `shared_frac` of the prompts starts with the same `shared_len` tokens."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(1, vocab, (shared_len,), generator=g).tolist()

    def lognormal(median, sigma, lo, hi):
        z = float(torch.randn((), generator=g))
        return int(min(hi, max(lo, round(median * math.exp(sigma * z)))))

    out = []
    for _ in range(n):
        plen = lognormal(prompt_median, prompt_sigma, *prompt_range)
        olen = lognormal(out_median, out_sigma, *out_range)
        own = torch.randint(1, vocab, (plen,), generator=g).tolist()
        share = float(torch.rand((), generator=g)) < shared_frac
        out.append(((shared + own) if share else own, olen))
    return out


def _pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]  # nearest-rank percentile


def _sync(torch, device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def check_greedy(torch, me, model, specs, device, block_size: int) -> dict:
    """Greedy tokens of the engine (all requests at once, prefix cache and batching on) equal generate()
    of each request alone: asserted for both attention paths."""
    out = {}
    for attention in ("per_request", "batched"):
        reqs = [me.Request(f"c{i}", list(p), m) for i, (p, m) in enumerate(specs)]
        eng = me.MiniEngine(model, num_blocks=sum(-(-(len(p) + m) // block_size) for p, m in specs) + 4,
                            block_size=block_size, max_num_batched_tokens=4096, max_num_seqs=len(specs),
                            device=device, attention=attention)
        got = eng.run(reqs)
        for r in reqs:
            ids = torch.tensor([r.prompt], device=device)
            ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=r.max_tokens,
                                 do_sample=False)[0, len(r.prompt):].tolist()
            assert got[r.rid] == ref, f"{attention}: {r.rid} differs from generate(): {got[r.rid]} vs {ref}"
        out[attention] = {"requests": len(reqs), "tokens": sum(len(v) for v in got.values()),
                          "prefix_hit_tokens": eng.stats["prefix_hit_tokens"]}
    return out


def agreement(torch, me, model, specs, device, block_size: int) -> float:
    """In bf16 the engine and generate() round differently (different kernels and orders): the fraction of
    requests whose greedy tokens still agree from start to end. Recorded, not asserted."""
    reqs = [me.Request(f"a{i}", list(p), m) for i, (p, m) in enumerate(specs)]
    eng = me.MiniEngine(model, num_blocks=sum(-(-(len(p) + m) // block_size) for p, m in specs) + 4,
                        block_size=block_size, max_num_batched_tokens=4096, max_num_seqs=len(specs),
                        device=device, attention="batched")
    got = eng.run(reqs)
    same = 0
    for r in reqs:
        ids = torch.tensor([r.prompt], device=device)
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=r.max_tokens, do_sample=False)
        same += got[r.rid] == ref[0, len(r.prompt):].tolist()
    return same / len(reqs)


def closed_loop(torch, me, model, specs, concurrency: int, attention: str, device, block_size: int,
                num_blocks: int, budget: int) -> dict:
    """Keep `concurrency` requests in the engine: a new one enters as soon as one finishes. Wall-clock
    times per request: TTFT (entry to first token), TPOT ((last - first token) / (tokens - 1))."""
    eng = me.MiniEngine(model, num_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=budget,
                        max_num_seqs=concurrency, device=device, attention=attention)
    pending = deque(me.Request(f"r{i}", list(p), m) for i, (p, m) in enumerate(specs))
    active, t_in, t_first, t_done = {}, {}, {}, {}
    step_rows, nonempty = [], 0
    _sync(torch, device)
    t0 = time.perf_counter()
    while pending or active:
        while pending and len(active) < concurrency:
            r = pending.popleft()
            eng.add_request(r)
            active[r.rid], t_in[r.rid] = r, time.perf_counter()
        before = eng.stats["forward_tokens"]
        eng.step()  # ends on the host: the tokens (or, off the all-greedy path, the logits) go to the CPU
        now = time.perf_counter()
        if eng.stats["forward_tokens"] > before:
            nonempty += 1
            step_rows.append(eng.stats["forward_tokens"] - before)
        for rid, r in list(active.items()):
            if r.output and rid not in t_first:
                t_first[rid] = now
            if rid in eng.finished:
                t_done[rid] = now
                del active[rid]
        assert eng.steps < 200_000, "no progress"
    _sync(torch, device)
    wall = time.perf_counter() - t0
    reqs = list(eng.finished.values())
    out_tokens = sum(len(r.output) for r in reqs)
    ttft = [(t_first[r.rid] - t_in[r.rid]) * 1e3 for r in reqs]
    tpot = [(t_done[r.rid] - t_first[r.rid]) * 1e3 / (len(r.output) - 1) for r in reqs if len(r.output) > 1]
    prompt_tokens = sum(len(p) for p, _ in specs)
    return {"concurrency": concurrency, "attention": attention, "requests": len(reqs), "wall_s": wall,
            "output_tokens": out_tokens, "output_tokens_per_s": out_tokens / wall,
            "ttft_ms": {"p50": _pct(ttft, 0.5), "p99": _pct(ttft, 0.99), "mean": statistics.fmean(ttft)},
            "tpot_ms": {"p50": _pct(tpot, 0.5), "p99": _pct(tpot, 0.99), "mean": statistics.fmean(tpot)},
            "steps": eng.steps, "steps_per_s": eng.steps / wall,
            "mean_batch_tokens": sum(step_rows) / max(1, nonempty), "max_batch_tokens": max(step_rows),
            "prompt_tokens": prompt_tokens, "prefix_hit_tokens": eng.stats["prefix_hit_tokens"],
            "prefix_hit_rate": eng.stats["prefix_hit_tokens"] / prompt_tokens,
            "preemptions": eng.stats["preemptions"], "recomputed_tokens": eng.stats["recomputed_tokens"],
            "forward_tokens": eng.stats["forward_tokens"]}


def generate_baseline(torch, model, specs, batch: int, device) -> dict:
    """transformers' generate() with static batches of `batch` requests in arrival order: left padding to
    the longest prompt, every row runs to the longest output of its batch (no EOS), the batch returns
    together. Useful tokens: each request's own output length."""
    wall, latency, useful, computed = 0.0, [], 0, 0
    for i in range(0, len(specs), batch):
        chunk = specs[i:i + batch]
        L, new = max(len(p) for p, _ in chunk), max(m for _, m in chunk)
        ids = torch.tensor([[0] * (L - len(p)) + list(p) for p, _ in chunk], device=device)
        mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p, _ in chunk], device=device)
        _sync(torch, device)
        t = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False)
        _sync(torch, device)
        dt = time.perf_counter() - t
        assert out.shape == (len(chunk), L + new)
        wall += dt
        latency += [dt * 1e3] * len(chunk)
        useful += sum(m for _, m in chunk)
        computed += len(chunk) * new
    return {"batch": batch, "requests": len(specs), "wall_s": wall, "output_tokens": useful,
            "output_tokens_per_s": useful / wall, "generated_tokens": computed,
            "padded_waste": 1 - useful / computed,
            "latency_ms": {"p50": _pct(latency, 0.5), "p99": _pct(latency, 0.99)}}


def step_breakdown(torch, me, model, specs, concurrency: int, attention: str, device, block_size: int,
                   num_blocks: int, steps: int = 5) -> dict:
    """`concurrency` requests all decoding; then `steps` steps timed piece by piece (a device sync around the
    forward): schedule() (host), the forward (wall), sample() (host; not called when every row is plain
    greedy: the engine then takes the argmax on the device, and that time is part of the rest),
    the rest (flattening, copying the logits to the host, bookkeeping).
    On a GPU, the kernel time of one forward is summed from torch.profiler: forward wall - kernel time is
    the time the GPU waits for Python to launch the next kernel."""
    eng = me.MiniEngine(model, num_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=8192,
                        max_num_seqs=concurrency, device=device, attention=attention)
    reqs = [me.Request(f"b{i}", list(p), 64) for i, (p, _) in enumerate(specs[:concurrency])]  # not done in time
    for r in reqs:
        eng.add_request(r)
    while any(not r.output for r in reqs) or eng.waiting:
        eng.step()
    times = {"schedule": [], "forward": [], "sample": [], "other": [], "step": []}
    sched, fwd, smp = eng.schedule, eng.model.forward, me.sample

    def timed_schedule():
        t = time.perf_counter()
        plan = sched()
        times["schedule"].append(time.perf_counter() - t)
        return plan

    def timed_forward(*a):
        _sync(torch, device)
        t = time.perf_counter()
        out = fwd(*a)
        _sync(torch, device)
        times["forward"].append(time.perf_counter() - t)
        return out

    def timed_sample(*a):
        t = time.perf_counter()
        out = smp(*a)
        times["sample"][-1] += time.perf_counter() - t
        return out

    eng.schedule, eng.model.forward, me.sample = timed_schedule, timed_forward, timed_sample
    for _ in range(steps):
        times["sample"].append(0.0)  # stays 0 when every row is plain greedy (the argmax is taken on the device)
        _sync(torch, device)
        t = time.perf_counter()
        eng.step()
        _sync(torch, device)
        times["step"].append(time.perf_counter() - t)
        times["other"].append(times["step"][-1] - times["schedule"][-1] - times["forward"][-1] - times["sample"][-1])
    eng.schedule, eng.model.forward, me.sample = sched, fwd, smp
    res = {"concurrency": concurrency, "attention": attention, "rows": len(reqs),
           "context_tokens_mean": statistics.fmean(len(r.tokens) for r in reqs)}
    for k, v in times.items():
        res[f"{k}_ms"] = statistics.median(v) * 1e3
    res["kernel_ms"], res["kernels"] = _kernel_ms(torch, eng) if str(device).startswith("cuda") else (None, None)
    if res["kernel_ms"] is not None:
        res["gpu_busy_fraction_of_step"] = res["kernel_ms"] / res["step_ms"]  # the rest: the GPU waits for the host
    return res


def _kernel_ms(torch, eng):
    """Device time of one engine step's kernels and copies, from torch.profiler: the sum of the durations of
    the device-side events (one stream, so they do not overlap), and how many there were."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            eng.step()
            torch.cuda.synchronize()
        device = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        return sum(e.time_range.elapsed_us() for e in device) / 1e3, len(device)
    except Exception as exc:  # a profiler problem must not lose the rest of the record
        print(f"profiler failed: {exc!r}", file=sys.stderr)
        return None, None


def measure(torch, shape: dict, device: str, dtype, check_dtype, concurrency=CONCURRENCY, requests=REQUESTS,
            workload_kw=GPU_WORKLOAD, block_size: int = 16, budget: int = 2048, check_requests: int = 4,
            check_tokens: int = 8, breakdown_at=(1, 64), time_budget_s: float = TIME_BUDGET_S) -> dict:
    me = _engine_mod()
    t_start = time.perf_counter()
    model = make_model(torch, shape, device, check_dtype)
    vocab = shape["vocab_size"]
    # 1. correctness before any timing: check_dtype (float64) engine == generate(), both attention paths
    specs_check = [(p, check_tokens) for p, _ in workload(torch, check_requests, vocab, seed=7, **workload_kw)]
    checked = check_greedy(torch, me, model, specs_check, device, block_size)
    model = model.to(dtype)
    if device != "cpu":
        torch.cuda.empty_cache()
    agree = agreement(torch, me, model, specs_check, device, block_size)
    params = sum(p.numel() for p in model.parameters())
    # 2. warm-up (kernels, cuBLAS handles, allocator) on a separate small workload
    warm = workload(torch, 8, vocab, seed=3, **workload_kw)
    for attention in ("per_request", "batched"):
        closed_loop(torch, me, model, warm, 4, attention, device, block_size, 4096, budget)
    # 3. loads
    loads, baseline, skipped = [], [], []
    for c in concurrency:
        specs = workload(torch, requests[c], vocab, seed=100 + c, **workload_kw)
        need = sum(-(-(len(p) + m) // block_size) for p, m in specs)
        per_req = max(-(-(len(p) + m) // block_size) for p, m in specs)
        num_blocks = min(need, c * per_req) + 8  # room for every request in flight: preemption is the exception
        for attention in ("batched", "per_request"):
            if time.perf_counter() - t_start > time_budget_s:
                skipped.append({"concurrency": c, "attention": attention})
                continue
            loads.append(closed_loop(torch, me, model, specs, c, attention, device, block_size, num_blocks, budget))
        if time.perf_counter() - t_start <= time_budget_s:
            baseline.append(generate_baseline(torch, model, specs, c, device))
    # 4. one step, piece by piece
    breakdown = []
    specs = workload(torch, max(breakdown_at), vocab, seed=5, **workload_kw)
    for c in breakdown_at:
        for attention in ("per_request", "batched"):
            nb = sum(-(-(len(p) + 64) // block_size) for p, _ in specs[:c]) + 8
            breakdown.append(step_breakdown(torch, me, model, specs, c, attention, device, block_size, nb))
    return {"model": {"config": dict(shape), "params": params, "dtype": str(dtype).replace("torch.", ""),
                      "weights": "random (transformers LlamaForCausalLM from a config, seed 0)"},
            "engine": {"block_size": block_size, "max_num_batched_tokens": budget,
                       "sampler": "all-greedy steps: argmax on the device, tokens copied to the host; "
                                  "otherwise sampler.py on the host (logits copied to the CPU)",
                       "attention": {"per_request": "one gather + einsum softmax call per request per layer",
                                     "batched": "one padded gather + scaled_dot_product_attention per layer"}},
            "workload": {k: (list(v) if isinstance(v, tuple) else v) for k, v in workload_kw.items()},
            "check": {"dtype": str(check_dtype).replace("torch.", ""), "tokens_per_request": check_tokens, **checked},
            "bf16_greedy_agreement": agree,
            "loads": loads, "skipped": skipped, "generate": baseline, "breakdown": breakdown,
            "timing": "wall clock (time.perf_counter) per request from entry into the engine; closed loop: a new "
                      "request enters when one finishes; every step ends on the host (the sampled tokens are copied "
                      "to the CPU)"}


def run(torch) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = False
    return measure(torch, BIG, "cuda", torch.bfloat16, torch.float64)
