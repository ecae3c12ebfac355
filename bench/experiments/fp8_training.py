"""FP8 training of a small GPT on one GPU: BF16 autocast against the block linears' three GEMMs run through
torch._scaled_mm with tensor-wise and row-wise scales (code/framework/fp8.py), and torchao's float8 recipes
when torchao is installed. Each variant trains from the same initialisation on the same batches; the record
keeps tokens/s (median step time after warm-up), the loss curve and the final loss.

Correctness first: on this GPU the real torch._scaled_mm must agree with the dequantise -> fp32 emulation
to the bf16 output's rounding, for both scale granularities, before anything is timed. Block-wise scaling
(DeepSeek-V3's 1x128 / 128x128) is probed through torch.nn.functional.scaled_mm and recorded as supported
or not; it is not trained here (the CPU lab emulates it).

Run: python -m bench.experiments fp8_training --timeout 1500 (torch.compile variants need minutes).
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from pathlib import Path

TITLE = "小 GPT 的 FP8 训练：BF16 与 torch._scaled_mm 张量级、行级 FP8（及 torchao）的吞吐与损失，同初值同数据"
USED_BY = ["docs/framework/fp8-training.md"]

SMOKE = os.environ.get("FP8_SMOKE") == "1"
CFG = dict(layers=4, h=4096, heads=32, vocab=8192) if not SMOKE else dict(layers=2, h=512, heads=8, vocab=1024)
SEQ, BATCH = (2048, 4) if not SMOKE else (256, 4)
STEPS = int(os.environ.get("FP8_STEPS", 200)) if not SMOKE else 20
# FP8_COMPILE=0 skips the torch.compile variants (minutes of compilation); the record says whether they ran
COMPILE = os.environ.get("FP8_COMPILE", "1") != "0"
WARMUP = 20 if not SMOKE else 5
LR = 3e-4
OFFSETS = 16            # the synthetic data: next token = previous + an offset from a peaked distribution


def _batches(torch, n: int, seed: int = 0):
    """n batches [SEQ + 1, BATCH] of an 'offset chain': token_{t+1} = token_t + d (mod V), d drawn from a
    fixed peaked distribution over OFFSETS values. Entropy of d is the loss floor; generated on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    probs = torch.softmax(2.0 * torch.randn(OFFSETS, generator=g, device="cuda"), 0)
    offsets = torch.randint(1, 64, (OFFSETS,), generator=g, device="cuda")
    out = []
    for _ in range(n):
        start = torch.randint(CFG["vocab"], (1, BATCH), generator=g, device="cuda")
        d = offsets[torch.multinomial(probs, SEQ * BATCH, replacement=True, generator=g)].view(SEQ, BATCH)
        out.append(torch.cat([start, (start + d.cumsum(0)) % CFG["vocab"]], 0))
    entropy = float(-(probs * probs.log()).sum())
    return out, entropy


def _self_check(torch, fp8) -> dict:
    """torch._scaled_mm on this GPU against the emulation, and the block-wise probe."""
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(1024, 2048, generator=g, device="cuda")
    b = torch.randn(2048, 4096, generator=g, device="cuda") / 45
    out = {}
    for gran in ("tensor", "row"):
        for da, db, name in ((fp8.E4M3, fp8.E4M3, "e4m3xe4m3"), (fp8.E5M2, fp8.E4M3, "e5m2xe4m3")):
            if gran == "row" and da is fp8.E5M2:
                continue  # the row-wise recipe is E4M3 everywhere
            real = fp8.scaled_mm_gemm(a, b, gran, da, db).float()
            emu = fp8.fp8_gemm(a, b, gran, da, db)
            err = float((real - emu).abs().max() / emu.abs().max())
            assert err < 1e-2, (gran, name, err)   # bf16 output: 2^-9 relative, plus accumulation order
            out[f"{gran}_{name}_max_rel_diff"] = err
    out["blockwise_scaled_mm"] = _probe_blockwise(torch, fp8, a, b)
    return out


def _probe_blockwise(torch, fp8, a, b) -> str:
    F = torch.nn.functional
    if not hasattr(F, "scaled_mm") or not hasattr(F, "ScalingType"):
        return "torch.nn.functional.scaled_mm not in this PyTorch"
    qa, sa = fp8.quantize_blocks(a, (1, 128), fp8.E4M3)          # sa: (M, K/128)
    qb, sb = fp8.quantize_blocks(b, (128, 128), fp8.E4M3)        # sb: (K/128, N/128)
    emu = fp8.dequantize_blocks(qa, sa, (1, 128)) @ fp8.dequantize_blocks(qb, sb, (128, 128))
    ST = F.ScalingType
    tried = []
    # cuBLAS wants the 1x128 scales K-block-major ("outer-dim-major"); try the layouts PyTorch has accepted
    for name, s_a, s_b in (("sa (M,K/128) col-major, sb (N/128,K/128)", sa.t().contiguous().t(), sb.t().contiguous()),
                           ("sa (M,K/128) row-major, sb (N/128,K/128)", sa.contiguous(), sb.t().contiguous()),
                           ("sa col-major, sb (K/128,N/128)", sa.t().contiguous().t(), sb.contiguous())):
        try:
            real = F.scaled_mm(qa, qb.t().contiguous().t(), s_a, ST.BlockWise1x128, s_b, ST.BlockWise128x128,
                               output_dtype=torch.bfloat16).float()
            err = float((real - emu).abs().max() / emu.abs().max())
            if err < 1e-2:
                return f"supported ({name}); max rel diff to emulation {err:.1e}"
            tried.append(f"{name}: ran, but differs from emulation by {err:.1e}")
        except Exception as exc:  # noqa: BLE001 - the record keeps the reason
            tried.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    return "not supported here: " + " | ".join(tried)


def _train(torch, gpt_train, fp8, variant: str, batches, compile_model: bool = False) -> dict:
    torch.manual_seed(0)
    model = gpt_train.GPT(CFG["layers"], CFG["h"], CFG["heads"], CFG["vocab"], p=0.0).cuda()
    params = sum(p.numel() for p in model.parameters())
    if variant.startswith("fp8-"):
        recipe = variant.split("-")[1]
        fp8.swap_linears(model, recipe, backend="scaled_mm")
    elif variant.startswith("torchao-"):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        config = Float8LinearConfig.from_recipe_name(variant.split("-", 1)[1])
        convert_to_float8_training(model, config=config, module_filter_fn=lambda m, fqn: fqn != "head")
    if compile_model:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, fused=True)
    losses, times = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for step, ids in enumerate(batches):
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids[:-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, CFG["vocab"]), ids[1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        losses.append(loss.item())
    steady = times[WARMUP:]
    step_s = statistics.median(steady)
    out = {"variant": variant, "compiled": compile_model, "step_ms_median": step_s * 1e3,
           "tokens_per_s": SEQ * BATCH / step_s, "final_loss": statistics.fmean(losses[-20:]),
           "loss_every_10": losses[::10], "first_loss": losses[0],
           "peak_mem_gib": torch.cuda.max_memory_allocated() / 2 ** 30, "params": params}
    del model, opt
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return out


def run(torch) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "framework"))
    import fp8
    import gpt_train

    cap = torch.cuda.get_device_capability()
    if cap < (8, 9):
        raise RuntimeError(f"FP8 GEMMs need sm_89 or newer; this GPU is sm_{cap[0]}{cap[1]}")
    check = _self_check(torch, fp8)
    batches, entropy = _batches(torch, STEPS)
    variants = ["bf16", "fp8-tensor", "fp8-row"]
    try:
        import torchao

        torchao_version = torchao.__version__
        variants += ["torchao-tensorwise", "torchao-rowwise"]
    except ImportError:
        torchao_version = None
    runs, errors = [], {}
    t0 = time.perf_counter()
    for v in variants:
        try:
            runs.append(_train(torch, gpt_train, fp8, v, batches))
        except Exception as exc:  # noqa: BLE001 - a recipe this stack cannot run is recorded, not fatal
            errors[v] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            gc.collect()
            torch.cuda.empty_cache()
    for v in (("bf16", "fp8-tensor") + (("torchao-tensorwise",) if torchao_version else ())) if COMPILE else ():
        try:
            runs.append(_train(torch, gpt_train, fp8, v, batches, compile_model=True))
        except Exception as exc:  # noqa: BLE001
            errors[v + "+compile"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            gc.collect()
            torch.cuda.empty_cache()
    base = {r["compiled"]: r for r in runs if r["variant"] == "bf16"}
    for r in runs:
        ref = base.get(r["compiled"])
        if ref:
            r["speedup_vs_bf16"] = r["tokens_per_s"] / ref["tokens_per_s"]
            r["final_loss_rel_diff_vs_bf16"] = (r["final_loss"] - ref["final_loss"]) / ref["final_loss"]
    params = runs[0]["params"] if runs else None
    return {"config": {**CFG, "seq": SEQ, "batch": BATCH, "steps": STEPS, "warmup_steps_excluded": WARMUP,
                       "lr": LR, "params": params, "compiled_variants_run": COMPILE, "optimizer": "AdamW fused, fp32 master weights",
                       "autocast": "bf16 outside the FP8 GEMMs; head, embedding, norms, attention in bf16/fp32",
                       "data": f"offset chain, {OFFSETS} offsets, loss floor {entropy:.3f} nats"},
            "self_check": check, "torchao": torchao_version, "runs": runs, "errors": errors,
            "train_seconds": round(time.perf_counter() - t0, 1)}
