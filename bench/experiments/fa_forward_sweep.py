"""Sweep the Hopper levers of the Triton FlashAttention forward against PyTorch SDPA's backends on one GPU."""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

TITLE = ("Triton FlashAttention 前向的 Hopper 杠杆扫描：TMA 描述符（主机/设备）、分块、warp 数、流水级数、"
         "QKᵀ 提前发射、warp 特化、因果块倒序，先对 fp32 参考验正确性再计时，对照 SDPA 三个后端")
USED_BY = ["notebooks/operator/flash-attention-lab.ipynb"]

ROOT = Path(__file__).resolve().parents[2]
# FA_SWEEP_SMOKE=1: tiny shapes on the CPU in Triton's interpreter (set TRITON_INTERPRET=1 too), each point
# timed by one wall-clock run, meaningless as performance: only for checking the sweep's own logic without a GPU.
SMOKE = os.environ.get("FA_SWEEP_SMOKE") == "1"
DEVICE = "cpu" if SMOKE else "cuda"
N_CTX, HEADS = (128, 2) if SMOKE else (4096, 32)
# the lab's four variants: batch chosen so that every variant has 4·N²·64·128 FLOPs (causal counted as half)
VARIANTS = {"d64": (64, False, 4), "d64-causal": (64, True, 8), "d128": (128, False, 2), "d128-causal": (128, True, 4)}
# stop compiling new points after this many seconds: 240 fits `python -m bench.experiments`'s default
# --timeout of 300 s; with --timeout 420 set FA_SWEEP_BUDGET_S=330 to be sure every point runs
BUDGET_S = float(os.environ.get("FA_SWEEP_BUDGET_S", "240"))
WARMUP_MS, REP_MS = 25, 100
REF_HEADS = 8  # heads of the float32 reference (the first B·H slices)

# (desc, BLOCK_M, BLOCK_N, num_warps, num_stages, warp_specialize, pipeline); most promising first, so that
# a run cut short by the budget still has the informative points. 15 per variant, +1 reversed for causal: 62.
POINTS = [
    ("host", 128, 64, 4, 3, False, False),
    ("host", 128, 128, 8, 2, False, False),
    ("host", 128, 64, 8, 3, False, False),
    ("host", 128, 128, 8, 3, False, False),   # d=128: 224 KiB of shared memory (Triton 3.9), near the limit
    ("pointer", 128, 64, 4, 3, False, False),  # same tiles with plain loads: what TMA buys
    ("pointer", 128, 128, 8, 2, False, False),
    ("host", 128, 64, 4, 3, False, True),      # next QK^T issued before this softmax (after FA3 §3.2)
    ("host", 128, 128, 8, 2, False, True),
    ("host", 128, 64, 8, 3, False, True),
    ("host", 128, 64, 4, 4, False, False),     # one more pipeline stage
    ("host", 64, 64, 4, 3, False, False),      # smaller query block: K, V re-read twice as often
    ("device", 128, 64, 4, 3, False, False),   # descriptor built in the kernel instead of on the host
    # warp specialisation on the key loop: Triton's sm_90 pass splits producer and consumer (setmaxnreg in the
    # PTX) only with num_warps = 4 and descriptors built in the kernel (Triton 3.9 compiled ahead of time: host
    # descriptors fail in the pass, num_warps = 8 compiles without specialising); causal runs one masked loop
    ("device", 128, 64, 4, 3, True, False),
    ("device", 128, 64, 4, 2, True, False),
    ("device", 128, 128, 4, 2, True, False),
]
REVERSED = [("host", 128, 64, 4, 3, False, False)]  # causal only: longest query blocks first


def _label(p):
    desc, bm, bn, w, s, ws, pipe, rev = p
    return f"{desc} BM{bm} BN{bn} w{w} s{s}" + (" ws" if ws else "") + (" pipe" if pipe else "") + (
        " rev" if rev else "")


def _apis(triton):
    import inspect

    import triton.language as tl
    out = {"triton": triton.__version__, "tl.make_tensor_descriptor": hasattr(tl, "make_tensor_descriptor"),
           "triton.set_allocator": hasattr(triton, "set_allocator")}
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
        out["TensorDescriptor"] = True
    except ImportError:
        out["TensorDescriptor"] = False
    out["tl.range(warp_specialize)"] = "warp_specialize" in inspect.signature(tl.range.__init__).parameters
    return out


def run(torch) -> dict:
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    sys.path.insert(0, str(ROOT / "code" / "operator"))
    import flash_attention_hopper as fah

    F = torch.nn.functional
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference is real fp32
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    cap = (0, 0) if SMOKE else torch.cuda.get_device_capability()
    sms = 0 if SMOKE else torch.cuda.get_device_properties(0).multi_processor_count

    def sync():
        if not SMOKE:
            torch.cuda.synchronize()

    def bench(fn):
        if SMOKE:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        return do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")

    results = {"n": N_CTX, "heads": HEADS, "dtype": "float16", "capability": f"{cap[0]}.{cap[1]}",
               "sms": sms, "smoke": SMOKE, "apis": _apis(triton),
               "timing": {"method": "triton.testing.do_bench", "warmup_ms": WARMUP_MS, "rep_ms": REP_MS,
                          "statistic": "median"},
               "budget_s": BUDGET_S, "variants": {}, "configs": {}}
    t_start = time.perf_counter()
    compiled = 0
    broken = None  # a CUDA error poisons the context: record it and stop launching
    # written after every point: a crash inside the compiler (not a Python exception) still leaves the results
    partial = Path(os.environ.get("FA_SWEEP_PARTIAL")
                   or Path(os.environ.get("OUT") or "/tmp") / "fa_forward_sweep.partial.json")
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    state = {}
    for name, (d, causal, batch) in VARIANTS.items():
        q, k, v = (torch.randn(batch, HEADS, N_CTX, d, device=DEVICE, dtype=torch.float16, generator=gen)
                   for _ in range(3))
        flops = 4 * N_CTX * N_CTX * d * batch * HEADS // (2 if causal else 1)
        # float32 reference on the first REF_HEADS (batch, head) slices
        q3, k3, v3 = (t.reshape(batch * HEADS, N_CTX, d)[:REF_HEADS].float() for t in (q, k, v))
        s = torch.matmul(q3, k3.transpose(-2, -1)) / math.sqrt(d)
        if causal:
            s.masked_fill_(torch.ones(N_CTX, N_CTX, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
        ref_lse = torch.logsumexp(s, -1)
        ref = torch.matmul(torch.softmax(s, -1), v3)
        del s, q3, k3, v3

        def err_of(o, ref=ref, batch=batch, d=d):
            sub = o.reshape(batch * HEADS, N_CTX, d)[:REF_HEADS].float()
            return float((sub - ref).abs().max())

        var = {"d": d, "causal": causal, "batch": batch, "flops": flops, "sdpa": {}, "points": []}
        best_sdpa = None
        for backend, enum in backends.items():
            def sdpa(enum=enum, q=q, k=k, v=v, causal=causal):
                with sdpa_kernel(enum):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            try:
                o = sdpa()
                sync()
                e = err_of(o)
                assert math.isfinite(e) and e < 1e-2, f"error {e}"
                ms = bench(sdpa)
                var["sdpa"][backend] = {"ms": ms, "tflops": flops / ms / 1e9, "max_err": e}
                if best_sdpa is None or ms < var["sdpa"][best_sdpa]["ms"]:
                    best_sdpa = backend
            except Exception as exc:  # a backend that cannot run this shape on this GPU
                var["sdpa"][backend] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            print(f"[{name}] sdpa-{backend}: {json.dumps(var['sdpa'][backend])}", flush=True)
        var["best_sdpa"] = best_sdpa
        # tolerance: twice the worst SDPA backend's error against the same reference, plus one fp16 ulp at 1
        sdpa_errs = [r["max_err"] for r in var["sdpa"].values() if "max_err" in r]
        var["tolerance"] = 2 * max(sdpa_errs, default=2e-3) + 2.0 ** -10
        results["variants"][name] = var
        state[name] = dict(q=q, k=k, v=v, causal=causal, batch=batch, d=d, flops=flops, err_of=err_of,
                           ref_lse=ref_lse, o=torch.empty_like(q),
                           lse=torch.empty(batch, HEADS, N_CTX, device=DEVICE, dtype=torch.float32),
                           best_ms=var["sdpa"][best_sdpa]["ms"] if best_sdpa else None)

    # two passes: every point without warp specialisation first (all variants), then the warp-specialised ones,
    # the least mature compiler path on sm_90, so that a crash there cannot cost the rest
    for ws_pass in (False, True):
        for name, st_ in state.items():
            var = results["variants"][name]
            points = [p + (False,) for p in POINTS] + ([p + (True,) for p in REVERSED] if st_["causal"] else [])
            for p in points:
                if p[5] != ws_pass:
                    continue
                desc, bm, bn, w, st, ws, pipe, rev = p
                q, k, v, o, lse, causal, d = (st_[x] for x in ("q", "k", "v", "o", "lse", "causal", "d"))
                row = {"desc": desc, "block_m": bm, "block_n": bn, "num_warps": w, "num_stages": st,
                       "warp_specialize": ws, "pipeline": pipe, "reverse": rev, "label": _label(p),
                       "smem_estimate": fah.shared_memory_bytes(bm, bn, d, st)}
                if broken:
                    row["status"] = "skipped: " + broken
                elif time.perf_counter() - t_start > BUDGET_S:
                    row["status"] = f"skipped: over the {BUDGET_S:.0f} s budget"
                else:
                    def fn(q=q, k=k, v=v, o=o, lse=lse, causal=causal, bm=bm, bn=bn, w=w, st=st, desc=desc, rev=rev,
                           ws=ws, pipe=pipe):
                        return fah.flash_attention_hopper(q, k, v, causal, block_m=bm, block_n=bn, num_warps=w,
                                                          num_stages=st, desc=desc, reverse=rev, warp_specialize=ws,
                                                          pipeline=pipe, out=o, lse=lse)
                    t0 = time.perf_counter()
                    try:
                        o.fill_(float("nan"))
                        fn()
                        sync()
                        compiled += 1
                        row["compile_s"] = round(time.perf_counter() - t0, 2)
                        kern = fah.LAST_KERNEL[0] if fah.LAST_KERNEL else None
                        if kern is not None:
                            row["regs"] = getattr(kern, "n_regs", None)
                            row["spills"] = getattr(kern, "n_spills", None)
                            row["shared"] = getattr(getattr(kern, "metadata", None), "shared", None)
                            ptx = (getattr(kern, "asm", None) or {}).get("ptx", "")
                            # what the compiler really emitted: TMA copies, async wgmma, register hand-off
                            row["ptx"] = {w: ptx.count(w) for w in ("cp.async.bulk.tensor", "cp.async.ca",
                                                                   "cp.async.cg", "wgmma.mma_async",
                                                                   "setmaxnreg", "mbarrier.try_wait")}
                        e = st_["err_of"](o)
                        full_bad = int((~torch.isfinite(o)).sum())
                        sub_lse = lse.reshape(st_["batch"] * HEADS, N_CTX)[:REF_HEADS]
                        lse_err = float((sub_lse - st_["ref_lse"]).abs().max())
                        row["max_err"], row["lse_err"] = e, lse_err
                        tol = var["tolerance"]
                        if full_bad or not (e <= tol) or not (lse_err <= 1e-3):
                            row["status"] = (f"wrong: err {e:.2e} (tol {tol:.2e}), lse err {lse_err:.2e}, "
                                             f"{full_bad} non-finite")
                        else:
                            ms = bench(fn)
                            row.update(status="ok", ms=ms, tflops=st_["flops"] / ms / 1e9)
                            if st_["best_ms"]:
                                row["vs_best_sdpa"] = st_["best_ms"] / ms
                    except Exception as exc:
                        msg = f"{type(exc).__name__}: {str(exc)[:300]}"
                        row["status"] = "error: " + msg
                        try:  # a compile error leaves the context usable; an illegal address does not
                            sync()
                            (torch.ones(1, device=DEVICE) + 1).item()
                        except Exception:
                            broken = "CUDA context broken by " + _label(p)
                var["points"].append(row)
                print(f"[{name}] {row['label']}: {row['status']}"
                      + (f" {row['tflops']:.0f} TFLOP/s ({row.get('vs_best_sdpa', 0):.0%} of "
                         f"sdpa-{var['best_sdpa']})" if row["status"] == "ok" else "")
                      + (f" regs {row.get('regs')} spills {row.get('spills')} smem {row.get('shared')}"
                         if "regs" in row else "")
                      + ("".join(f" {w.split('.')[-1] if w != 'cp.async.bulk.tensor' else 'tma'}={c}"
                                 for w, c in row["ptx"].items() if c) if row.get("ptx") else ""), flush=True)
                try:
                    partial.write_text(json.dumps(results), encoding="utf-8")
                except OSError:
                    pass
    for name, var in results["variants"].items():
        ok = [r for r in var["points"] if r["status"] == "ok"]
        if ok:
            best = max(ok, key=lambda r: r["tflops"])
            var["best"] = best
            results["configs"][name] = {k: best[k] for k in ("desc", "block_m", "block_n", "num_warps",
                                                             "num_stages", "warp_specialize", "pipeline",
                                                             "reverse")}
        var["levers"] = _levers(var["points"])
    del state
    if not SMOKE:
        torch.cuda.empty_cache()
    results["compiled"] = compiled
    results["seconds"] = round(time.perf_counter() - t_start, 1)
    print("CONFIGS =", json.dumps(results["configs"], indent=1), flush=True)
    for name, var in results["variants"].items():
        b = var.get("best")
        if b and var.get("best_sdpa"):
            print(f"{name}: best {b['label']} {b['tflops']:.0f} TFLOP/s = {b['vs_best_sdpa']:.0%} of "
                  f"sdpa-{var['best_sdpa']} {var['sdpa'][var['best_sdpa']]['tflops']:.0f}", flush=True)
    return results


def _levers(points):
    """Pairs of measured points that differ in one lever only: the ratio new/old of their TFLOP/s."""
    ok = {(r["desc"], r["block_m"], r["block_n"], r["num_warps"], r["num_stages"], r["warp_specialize"],
           r["pipeline"], r["reverse"]): r["tflops"] for r in points if r["status"] == "ok"}
    out = []
    for key, tf in ok.items():
        desc, bm, bn, w, s, ws, pipe, rev = key
        pairs = [("TMA (host descriptor) vs pointer loads", ("pointer", bm, bn, w, s, ws, pipe, rev), desc == "host"),
                 ("device vs host descriptor", ("host", bm, bn, w, s, ws, pipe, rev), desc == "device"),
                 ("warp_specialize on", (desc, bm, bn, w, s, False, pipe, rev), ws),
                 ("QK^T of the next block before this softmax", (desc, bm, bn, w, s, ws, False, rev), pipe),
                 ("num_stages 4 vs 3", (desc, bm, bn, w, 3, ws, pipe, rev), s == 4),
                 ("BLOCK_M 128 vs 64", (desc, 64, bn, w, s, ws, pipe, rev), bm == 128),
                 ("causal blocks longest first", (desc, bm, bn, w, s, ws, pipe, False), rev)]
        for what, base, applies in pairs:
            if applies and base in ok:
                out.append({"lever": what, "config": f"BM{bm} BN{bn} w{w} s{s}", "ratio": tf / ok[base]})
    return out
