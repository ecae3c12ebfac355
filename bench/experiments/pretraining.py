"""An end-to-end pretraining run of a small GPT on one GPU, with the code of the CPU lab
(code/algorithm/pretrain.py): the synthetic Markov corpus, a byte-level BPE, uint16 shards and the strided
loader, nanochat's block (QK-norm, parameter-free RMSNorm, ReLU^2, soft-capped logits, untied head), AdamW
with global-norm clipping and a WSD schedule, bf16 autocast. The record keeps tokens/s, MFU, the training
and validation curves (bits per byte), the final validation bpb and the corpus' entropy floor, and the
validation bpb of a cosine-schedule run of the same length from the same initialisation.

MFU = (6 N + 12 L d T) tokens/s / peak, N the matmul weights (nanochat's estimate_flops; PaLM appendix B),
peak the dense BF16 Tensor Core rate of data/hardware/gpus.yml (NVIDIA H200 datasheet: 1,979 TFLOPS with
sparsity, half without).

Run: python -m bench.experiments pretraining (about 4 minutes on an H200). PRETRAIN_COMPILE=1 wraps the
model in torch.compile. PRETRAIN_SMOKE=1 runs a tiny version on the CPU in seconds (for tests).
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TITLE = "小 GPT 端到端预训练：合成马尔可夫语料、BPE、uint16 分片、nanochat 的块、WSD 与余弦、bf16，记录吞吐、MFU 与验证 bpb"
USED_BY = ["docs/algorithm/pretraining-run.md"]

SMOKE = os.environ.get("PRETRAIN_SMOKE") == "1"
COMPILE = os.environ.get("PRETRAIN_COMPILE") == "1"
ROOT = Path(__file__).resolve().parents[2]

if SMOKE:
    LANG = dict(n_words=64, k=4)
    DOCS, VAL_DOCS, VOCAB = 200, 20, 320
    MODEL = dict(seq_len=32, n_layer=2, n_head=2, d_model=32)
    B, STEPS, WARMUP, LR, EVAL_EVERY = 4, 12, 3, 3e-3, 6
else:
    LANG = dict(n_words=2048, k=8)
    DOCS, VAL_DOCS, VOCAB = 300_000, 4_000, 4096   # ~18M training tokens: the 500 steps (16M tokens) stay under one epoch
    MODEL = dict(seq_len=1024, n_layer=12, n_head=6, d_model=768)
    B, STEPS, WARMUP, LR, EVAL_EVERY = 32, 500, 50, 1.5e-3, 100
DECAY = 0.3


def _corpus(pretrain, workers: int):
    """Documents in chunks of a fixed size with their own seeds (in parallel on the host's cores; the chunk
    size does not depend on the core count, so every host builds the same corpus), one BPE trained on the
    training documents, every document encoded."""
    import bpe

    lang = pretrain.make_language(seed=0, **LANG)
    chunk = min(1000, DOCS)
    seeds = list(range(1, -(-DOCS // chunk) + 1))
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            parts = list(pool.map(pretrain.sample_docs, [lang] * len(seeds), [chunk] * len(seeds), seeds))
    else:
        parts = [pretrain.sample_docs(lang, chunk, s) for s in seeds]
    docs = [d for p in parts for d in p][:DOCS]
    texts = [t for t, _ in docs]
    vocab, merges = bpe.train(texts[VAL_DOCS:VAL_DOCS + 20_000], VOCAB, special_tokens=["<|bos|>"])
    enc = bpe.ByteBPE(vocab, merges, special_tokens=["<|bos|>"])
    return docs, vocab, [enc.encode(t) for t in texts]


def _peak_tflops(torch) -> float | None:
    import yaml

    gpus = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    for spec in gpus.values():
        if spec.get("device_name") == name:
            return spec["bf16_tensor_dense_tflops"]
    return None


def _run_schedule(torch, pretrain, cfg, paths, vb, tb, schedule: str, device, dtype):
    torch.manual_seed(0)
    model = pretrain.GPT(cfg).to(device)
    opt = pretrain.make_optimizer(model, LR)
    fwd = torch.compile(model) if COMPILE else model
    loader = pretrain.ShardLoader(paths, B, cfg.seq_len)
    if schedule == "wsd":
        lr_at = lambda s: pretrain.wsd(s, STEPS, WARMUP, DECAY)  # noqa: E731
    else:
        lr_at = lambda s: pretrain.cosine(s, STEPS, WARMUP)  # noqa: E731

    def evaluate():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            return pretrain.evaluate_bpb(model, [(x.to(device), y.to(device)) for x, y in vb], tb.to(device))

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    train_loss, norms, step_s, curve = [], [], [], [{"step": 0, **evaluate()}]
    for start in range(0, STEPS, EVAL_EVERY):
        n = min(EVAL_EVERY, STEPS - start)
        sync()
        t0 = time.perf_counter()
        losses, gn = pretrain.train_steps(fwd, opt, loader, n, lr_at, LR, start=start, clip=1.0, autocast_dtype=dtype)
        sync()
        step_s += [(time.perf_counter() - t0) / n] * n
        train_loss += losses
        norms += gn
        curve.append({"step": start + n, **evaluate()})
    out = {"schedule": schedule, "val_curve": curve, "train_loss_every_10": train_loss[::10],
           "grad_norm_every_10": norms[::10], "final_val_bpb": curve[-1]["bpb"]}
    # steady state: leave out the first evaluation interval (compilation, allocator warm-up)
    out["step_s_median"] = statistics.median(step_s[EVAL_EVERY:] or step_s)
    if schedule == "wsd":
        stable_end = STEPS - round(DECAY * STEPS)
        before = [c for c in curve if c["step"] <= stable_end][-1]
        out["val_bpb_before_decay"] = {"step": before["step"], "bpb": before["bpb"]}
    return out


def run(torch) -> dict:
    sys.path.insert(0, str(ROOT / "code" / "algorithm"))
    import pretrain

    device = torch.device("cuda" if torch.cuda.is_available() and not SMOKE else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.perf_counter()
    docs, vocab, toks = _corpus(pretrain, 1 if SMOKE else min(16, os.cpu_count() or 1))
    corpus_s = time.perf_counter() - t0
    floor = pretrain.entropy_floor_bpb(docs[:VAL_DOCS])
    cfg = pretrain.GPTConfig(vocab_size=len(vocab), **MODEL)
    n_tokens = sum(len(t) + 1 for t in toks)
    with tempfile.TemporaryDirectory() as tmp:
        paths, val = pretrain.write_shards(toks, tmp, 0, 10_000_000 if not SMOKE else 4000, VAL_DOCS)
        vb = pretrain.val_batches(val, B, cfg.seq_len)
        tb = pretrain.token_byte_lengths(vocab, [0])
        runs = [_run_schedule(torch, pretrain, cfg, paths, vb, tb, s, device, dtype) for s in ("wsd", "cosine")]
    wsd = runs[0]
    probe = pretrain.GPT(cfg)
    params = sum(p.numel() for p in probe.parameters())
    flops_per_token = probe.flops_per_token()
    tokens_per_s = B * cfg.seq_len / wsd["step_s_median"]
    peak = _peak_tflops(torch)
    return {
        "smoke": SMOKE, "compiled": COMPILE, "device": str(device), "autocast": str(dtype),
        "config": {**MODEL, "vocab_size": len(vocab), "batch": B, "steps": STEPS, "warmup": WARMUP,
                   "decay_frac": DECAY, "lr": LR, "clip": 1.0, "language": LANG, "docs": DOCS, "val_docs": VAL_DOCS},
        "corpus": {"tokens": n_tokens, "bytes": sum(len(t.encode()) for t, _ in docs), "seconds": round(corpus_s, 1),
                   "epochs": STEPS * B * cfg.seq_len / max(1, n_tokens - sum(len(t) + 1 for t in toks[:VAL_DOCS]))},
        "params": params, "flops_per_token": flops_per_token,
        "tokens_per_s": tokens_per_s, "step_ms_median": wsd["step_s_median"] * 1e3,
        "peak_bf16_tflops": peak,
        "mfu": flops_per_token * tokens_per_s / (peak * 1e12) if peak else None,
        "entropy_floor_bpb": floor, "final_val_bpb": wsd["final_val_bpb"],
        "val_bpb_before_decay": wsd["val_bpb_before_decay"], "val_curve": wsd["val_curve"],
        "train_loss_every_10": wsd["train_loss_every_10"], "grad_norm_every_10": wsd["grad_norm_every_10"],
        "cosine": {k: runs[1][k] for k in ("final_val_bpb", "val_curve", "step_s_median")},
        "bits_per_nat": 1 / math.log(2),
    }


if __name__ == "__main__":
    import json

    import torch

    print(json.dumps(run(torch), indent=1))
