"""Activation and step memory of a GPT trained on one GPU, against the calculator of memory_budget.py."""
from __future__ import annotations

import sys
from pathlib import Path

TITLE = "GPT 一步训练的显存：每层激活（fp32、bf16，有无重计算）与整步峰值，对照 Korthikanti 公式"
USED_BY = ["docs/framework/memory-precision.md"]

S, B, H, A, VOCAB = 2048, 4, 2048, 16, 32000


def _activation_bytes(torch, gpt_train, layers: int, dtype, recompute: bool) -> int:
    """memory_allocated after the forward pass minus before it: what the forward keeps for backward
    (plus the logits and the embedding output, which cancel in the difference between two depths)."""
    torch.manual_seed(0)
    model = gpt_train.GPT(layers, H, A, VOCAB, recompute=recompute, p=0.1).to("cuda", dtype).train()
    ids = torch.randint(0, VOCAB, (S, B), device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    logits = model(ids)
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    logits.float().square().mean().backward()  # the kept tensors suffice for backward
    del model, logits, ids
    torch.cuda.empty_cache()
    return after - before


def _step_peak(torch, gpt_train, memory_budget, layers: int, recompute: bool) -> dict:
    """One full AMP step (fp32 parameters, bf16 autocast, AdamW): peak memory against the calculator."""
    torch.manual_seed(0)
    model = gpt_train.GPT(layers, H, A, VOCAB, recompute=recompute, p=0.1).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, VOCAB, (S, B), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1).float(), ids.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    step()  # the optimizer states now exist
    torch.cuda.synchronize()
    states = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    n = sum(p.numel() for p in model.parameters())
    cfg = memory_budget.GPT(layers=layers, hidden=H, heads=A, vocab=VOCAB)
    pred = memory_budget.step_memory(cfg, S, B, recompute="full" if recompute else "none")
    out = {"layers": layers, "recompute": recompute, "params": n, "loss": float(loss.detach()),
           "allocated_between_steps_bytes": states, "peak_bytes": peak,
           "calculator_bytes": {k: float(v) for k, v in pred.items()}}
    del model, opt, ids
    torch.cuda.empty_cache()
    return out


def run(torch) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "code" / "framework"))
    import gpt_train
    import memory_budget

    per_layer = []
    for dtype, value_bytes in ((torch.bfloat16, 2), (torch.float32, 4)):
        for recompute in (False, True):
            two = _activation_bytes(torch, gpt_train, 2, dtype, recompute)
            four = _activation_bytes(torch, gpt_train, 4, dtype, recompute)
            measured = (four - two) / 2
            formula = (value_bytes * S * B * H if recompute
                       else memory_budget.layer_activation_bytes(S, B, H, A, value_bytes, dropout=True))
            per_layer.append({"dtype": str(dtype).removeprefix("torch."), "recompute": recompute,
                              "measured_bytes": measured, "formula_bytes": formula,
                              "ratio": measured / formula})
    steps = [_step_peak(torch, gpt_train, memory_budget, 4, rc) for rc in (False, True)]
    return {"shape": {"s": S, "b": B, "h": H, "a": A, "vocab": VOCAB, "dropout": 0.1},
            "per_layer_method": "(memory_allocated after forward at 4 layers - at 2 layers) / 2",
            "per_layer": per_layer, "step": steps}
