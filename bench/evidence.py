"""Evidence for the gap between the labs' Triton kernels and the fastest library on the same GPU.

`python -m bench.evidence [--out DIR]` (GPU only): for the FlashAttention and GEMM labs, the
configuration the autotuner chose, the compiled kernel's registers, spills, shared memory and
instruction mix (wgmma, TMA copies, setmaxnreg for warp specialisation), and the names and times of the
library kernels that PyTorch runs (torch.profiler), written to DIR/evidence.json.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.__main__ import lab_namespace  # noqa: E402
from tools import labs  # noqa: E402

PTX_OPS = ["wgmma.mma_async", "mma.sync", "cp.async.bulk.tensor", "cp.async.cg", "setmaxnreg", "mbarrier.try_wait",
           "ex2.approx", "bar.sync"]


def ptx_counts(ptx: str) -> dict[str, int]:
    return {op: len(re.findall(re.escape(op) + r"[.\s]", ptx)) for op in PTX_OPS}


def compiled_info(kernel) -> dict:
    md = getattr(kernel, "metadata", None)
    return {"n_regs": getattr(kernel, "n_regs", None), "n_spills": getattr(kernel, "n_spills", None),
            "shared_bytes": getattr(md, "shared", None), "num_warps": getattr(md, "num_warps", None),
            "num_stages": getattr(md, "num_stages", None), "ptx": ptx_counts(kernel.asm["ptx"])}


def library_kernels(torch, fn, reps=5) -> list[dict]:
    """Names and mean device times of the kernels one call of fn launches."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out = []
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" or getattr(ev, "self_device_time_total", 0):
            t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
            out.append({"name": ev.key[:200], "calls": ev.count, "us_per_call": t / max(ev.count, 1)})
    return sorted(out, key=lambda r: -r["us_per_call"])[:6]


def fa_evidence(torch) -> dict:
    ns = lab_namespace(labs.NOTEBOOKS / "operator" / "flash-attention-lab.ipynb")
    case = ns["bench_cases"](4096)
    out = {}
    for name in ("d64", "d64-causal", "d128", "d128-causal"):
        case["runs"][f"triton-{name}"]()  # autotunes
        torch.cuda.synchronize()
    tuned = ns["flash_attn_fwd_tuned"]
    for key, cfg in tuned.cache.items():
        out.setdefault("triton_best_configs", []).append({"key": str(key), "config": str(cfg)})
    # compile the chosen configuration once more directly, to read its PTX and resources
    import math

    import triton

    for d, causal in ((64, False), (128, False), (64, True), (128, True)):
        batch = (4 * 64 // d) * (2 if causal else 1)
        q, k, v = (torch.randn(batch, 32, 4096, d, device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(batch, 32, 4096, device="cuda")
        best = next((c for kk, c in tuned.cache.items() if d in kk and causal in kk), None)
        if best is None:
            continue
        grid = (triton.cdiv(4096, best.kwargs["BLOCK_M"]), batch * 32)
        compiled = ns["flash_attn_fwd_kernel"][grid](
            q, k, v, o, lse, 1.0 / math.sqrt(d), 4096, 32, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *o.stride()[:3], HEAD_DIM=d, CAUSAL=causal, num_warps=best.num_warps, num_stages=best.num_stages,
            **best.kwargs)
        info = {"config": str(best), **compiled_info(compiled)}
        info["sdpa_kernels"] = {b: library_kernels(torch, lambda b=b: ns["attention_sdpa"](q, k, v, causal, b))
                                for b in ("flash", "cudnn", "efficient")}
        out[f"d{d}" + ("-causal" if causal else "")] = info
    return out


def gemm_evidence(torch) -> dict:
    ns = lab_namespace(labs.NOTEBOOKS / "operator" / "gemm-lab.ipynb")
    out = {}
    for n in (4096, 8192):
        for dt in (torch.float16, torch.bfloat16):
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            c = torch.empty(n, n, device="cuda", dtype=dt)
            ns["matmul_tma"](a, b, out=c)
            ns["matmul_grouped"](a, b, out=c)
            torch.cuda.synchronize()
            out[f"{n}-{str(dt).split('.')[-1]}"] = {
                "cublas_kernels": library_kernels(torch, lambda: torch.matmul(a, b, out=c)),
                "triton_tma_kernels": library_kernels(torch, lambda: ns["matmul_tma"](a, b, out=c)),
            }
    for name in ("matmul_tma_tuned", "matmul_grouped_tuned"):
        out[name] = {str(k): str(v) for k, v in ns[name].cache.items()}
    # resources and instruction mix of the TMA kernel at its chosen 8192 fp16 configuration
    tuned = ns["matmul_tma_tuned"]
    key, best = next(((k, v) for k, v in tuned.cache.items() if 8192 in k), (None, None))
    if best is not None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
        c = torch.empty_like(a)
        compiled = ns["matmul_tma_persistent_kernel"][(ns["NUM_SMS"],)](
            a, b, c, 8192, 8192, 8192, NUM_SMS=ns["NUM_SMS"], num_warps=best.num_warps, num_stages=best.num_stages,
            **best.kwargs)
        out["tma_8192_fp16_compiled"] = {"config": str(best), **compiled_info(compiled)}
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.evidence")
    parser.add_argument("--out", default=str(ROOT / "test-results"))
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("python -m bench.evidence needs an NVIDIA GPU; nothing was run.")
        return 2
    result = {}
    for name, fn in (("flash_attention", fa_evidence), ("gemm", gemm_evidence)):
        try:
            result[name] = fn(torch)
        except Exception as exc:  # noqa: BLE001
            import traceback

            result[name] = {"error": traceback.format_exc()[-3000:]}
        print(json.dumps(result[name], indent=1)[:6000], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "evidence.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
