"""An optimisation ladder for one GPT training step: correctness against fp64 first, then time, memory and profile."""
from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from pathlib import Path

TITLE = "GPT 训练步的调优阶梯：fp32 → TF32 → bf16 autocast → SDPA → fused AdamW → torch.compile，先对 fp64 验正确性再计时"
USED_BY = ["docs/stack/tuning-case-study.md"]

SMOKE = os.environ.get("TUNING_SMOKE") == "1"
TIMED = 5 if SMOKE else 60       # timed steps per rung (median)
WARMUP = 3
PROFILED = 3                     # steps under torch.profiler
TRAIN = 10 if SMOKE else 50      # steps of the training comparison (first and last rung)

# order matters: the first category whose words appear in the (lower-cased) kernel name wins
CATEGORIES = [
    ("optimizer", ("multi_tensor_apply", "adam", "foreach")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "masked_fill")),
    ("gemm", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "matmul", "_mm_", "splitk")),
    ("elementwise_norm", ("norm", "elementwise", "vectorized", "unrolled", "reduce", "gelu", "triton_",
                          "softmax", "nll", "embedding", "index", "copy", "cat", "fill", "add", "mul")),
]


def classify(name: str) -> str:
    low = name.lower()
    if "softmax" in low and not any(w in low for w in ("log_softmax", "logsoftmax", "triton")):
        # the hand-written attention's softmax (softmax_warp_*); the loss's log-softmax kernels are
        # named cunn_SoftMaxForward/Backward<..., LogSoftMax...Epilogue> and are not attention.
        return "attention"
    for cat, words in CATEGORIES:
        if any(w in low for w in words):
            return cat
    return "other"


def _profile(torch, step, batches) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(PROFILED):
            step(*batches[i % len(batches)])
        torch.cuda.synchronize()
    # GPU-side events minus the user annotations that Kineto also puts on the GPU timeline
    # ("Optimizer.step#AdamW.step" spans the optimizer's kernels; counting it would count them twice)
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA
               and not getattr(e, "is_user_annotation", False)
               and not e.name.startswith(("Optimizer.", "ProfilerStep"))]  # kernel names may contain '#'
                                                                           # ({lambda()#1}): no test on it
    dropped = sorted({e.name for e in prof.events() if e.device_type == DeviceType.CUDA} - {e.name for e in kernels})
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in spans:  # union of kernel intervals (us)
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    by_cat: dict[str, float] = {}
    by_name: dict[str, list] = {}
    for e in kernels:
        us = e.time_range.end - e.time_range.start
        cat = classify(e.name)
        by_cat[cat] = by_cat.get(cat, 0.0) + us
        slot = by_name.setdefault(e.name, [0.0, 0, cat])
        slot[0] += us
        slot[1] += 1
    total = sum(by_cat.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:12]
    return {"kernels_per_step": len(kernels) / PROFILED, "annotations_left_out": dropped,
            "kernel_ms_per_step": total / PROFILED / 1e3,
            "busy_ms_per_step": busy / PROFILED / 1e3,
            "category_ms_per_step": {k: v / PROFILED / 1e3 for k, v in sorted(by_cat.items())},
            "category_share": {k: v / total for k, v in sorted(by_cat.items())},
            "top_kernels": [{"name": n[:160], "category": c, "ms_per_step": t / PROFILED / 1e3,
                             "calls_per_step": k / PROFILED} for n, (t, k, c) in top]}


def run(torch) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "stack"))
    import tuning

    assert torch.cuda.is_available(), "tuning_ladder needs a CUDA GPU"
    dev = torch.device("cuda")
    s = tuning.GPU_SHAPE
    state = tuning.initial_state(s)
    batches = [(i.to(dev), t.to(dev)) for i, t in tuning.markov_batches(s, TRAIN)]
    ids0, tg0 = batches[0]
    t0 = time.perf_counter()
    ref_loss, ref_grad = tuning.fp64_reference(state, s, dev, ids0, tg0)
    ref_seconds = time.perf_counter() - t0
    gc.collect()
    torch.cuda.empty_cache()
    flops = tuning.train_flops(s)
    tokens = s.batch * s.seq
    rungs, curves = [], {}
    for i, rung in enumerate(tuning.LADDER):
        torch._dynamo.reset()
        torch.cuda.reset_peak_memory_stats()
        tr0 = time.perf_counter()
        model, loss_of, step = tuning.build(rung, state, s, dev)
        # 1. correctness first: same weights, same batch, before any update
        loss, grad = tuning.loss_and_grad(model, loss_of, ids0, tg0)
        err = {"loss_rel_err": tuning.rel_err(loss, ref_loss), "grad_rel_err": tuning.rel_err(grad, ref_grad),
               "loss_tol": tuning.tolerance(rung, s, "loss"), "grad_tol": tuning.tolerance(rung, s, "grad")}
        del grad
        assert err["loss_rel_err"] < err["loss_tol"], (rung.name, err)
        assert err["grad_rel_err"] < err["grad_tol"], (rung.name, err)
        # 2. the training comparison (first and last rung), which also warms up
        if i in (0, len(tuning.LADDER) - 1):
            losses = [step(*b) for b in batches]
            curves[rung.name] = [float(x) for x in torch.stack(losses).cpu()]
        for k in range(WARMUP):
            step(*batches[k % len(batches)])
        torch.cuda.synchronize()
        # 3. time: CUDA events around each step, one synchronize at the end
        torch.cuda.reset_peak_memory_stats()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(TIMED)]
        for k, (a, b) in enumerate(ev):
            a.record()
            step(*batches[k % len(batches)])
            b.record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) for a, b in ev]
        peak = torch.cuda.max_memory_allocated()
        med = statistics.median(times)
        # 4. where the time goes
        prof = _profile(torch, step, batches)
        prof["busy_fraction"] = min(1.0, prof["busy_ms_per_step"] / med)
        rungs.append({"rung": rung.name, "config": {k: v for k, v in vars(rung).items() if k != "name"},
                      "matmul_format": tuning.matmul_format(rung), **err,
                      "first_loss": loss, "step_ms_median": med, "step_ms_min": min(times), "step_ms_max": max(times),
                      "tokens_per_s": tokens / (med / 1e3), "tflops": flops / (med / 1e3) / 1e12,
                      "peak_memory_bytes": peak, "rung_seconds": time.perf_counter() - tr0, "profile": prof})
        print(rung.name, f"{med:.2f} ms", f"{flops / med / 1e9:.1f} TFLOP/s", err, flush=True)
        del model, loss_of, step
        gc.collect()
        torch.cuda.empty_cache()
    torch.set_float32_matmul_precision("highest")
    first, last = tuning.LADDER[0].name, tuning.LADDER[-1].name
    tail = max(1, TRAIN // 5)
    mean_first = statistics.fmean(curves[first][-tail:])
    mean_last = statistics.fmean(curves[last][-tail:])
    training = {"steps": TRAIN, "lr": 6e-4, "data": "markov_batches: successor map over 1024 tokens, 10% uniform noise",
                "curves": curves, "tail_steps": tail, "tail_mean": {first: mean_first, last: mean_last},
                "tail_rel_diff": abs(mean_last - mean_first) / mean_first}
    print("training", {k: v for k, v in training.items() if k != "curves"}, flush=True)
    assert curves[last][-1] < 0.9 * curves[last][0], "the optimised model did not train"
    assert training["tail_rel_diff"] < 0.10, training
    return {"shape": vars(s), "params": sum(v.numel() for v in state.values()),
            "matmul_params": tuning.matmul_params(s), "train_flops_per_step": flops, "tokens_per_step": tokens,
            "flops_formula": "6 * matmul_params * tokens + 12 * layers * seq^2 * d * batch",
            "reference": {"dtype": "float64", "attention": "manual", "loss": ref_loss, "seconds": ref_seconds},
            "timed_steps": TIMED, "warmup_steps": WARMUP, "profiled_steps": PROFILED,
            "smoke": SMOKE, "rungs": rungs, "training": training}
