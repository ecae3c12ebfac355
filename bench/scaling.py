"""Scaling of a small GPT's training step under DDP, FSDP2 and tensor parallelism on 1, 2, 4, 8 GPUs.

`python -m bench.scaling [--gpus 1,2,4,8] [--modes ddp,fsdp,tp] [--steps 20] [--warmup 5] [--out DIR]`

The model is code/framework/gpt_train.py's GPT (dropout off); its layers get a forward that reads the
number of attention heads from the local q/k/v width, so the same layer runs whole (DDP, FSDP) or with
its heads split over the ranks (TP). Per GPU count and mode it reports:
- tokens/s: DDP and FSDP keep the per-GPU batch (weak scaling, n x b x s tokens a step); TP splits one
  batch of b x s tokens over the ranks (strong scaling);
- scaling efficiency: tokens/s(n) / (n x tokens/s of the plain model on 1 GPU) for DDP/FSDP, and
  speed-up / n for TP;
- communication share: the NCCL kernels' time in a profiled step over the step time (on gloo: the
  time of the collectives' CPU events), and for DDP the exposed part, step time minus the step time
  under no_sync() (no gradient all-reduce).
Step time = wall time over `steps` steps after `warmup`, synchronised, max over ranks.

`--cpu N` runs the same code on N gloo ranks with a tiny model and first checks, against a
single-process run on the concatenated batch, that DDP's and FSDP's gradients and TP's loss and
gradients are the same (float32, within 1e-5 relative); CPU timings are CPU timings, written only to --out.
Records: data/records/<gpu>-x<N>/scaling.json with the provenance of `python -m bench`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "code" / "framework"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.collectives import ALWAYS_ENV, _provenance, spawn  # noqa: E402
from gpt_train import GPT, Layer  # noqa: E402  (code/framework/gpt_train.py)

SCHEMA_VERSION = 1
MODES = ("ddp", "fsdp", "tp")
GPU_MODEL = {"layers": 8, "hidden": 1024, "heads": 16, "vocab": 32768, "seq": 1024, "batch": 8}
CPU_MODEL = {"layers": 2, "hidden": 32, "heads": 4, "vocab": 64, "seq": 16, "batch": 4}


class LocalHeadsLayer(Layer):
    """gpt_train.Layer with the head count taken from the q/k/v projection's local output width: the same
    arithmetic as Layer.forward when whole, and a/t heads per rank when qkv is column-parallel over t ranks."""

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        d = h // self.a
        qkv = self.qkv(self.ln1(x))
        a_loc = qkv.shape[-1] // (3 * d)
        q, k, v = qkv.reshape(s, b * a_loc, 3 * d).transpose(0, 1).split(d, dim=-1)
        scores = torch.bmm(q, k.transpose(1, 2)) * (1.0 / math.sqrt(d))
        probs = F.dropout(scores.masked_fill(causal, float("-inf")).softmax(-1), self.p, self.training)
        ctx = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, a_loc * d)
        x = x + F.dropout(self.proj(ctx), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


def build(m: dict, device) -> GPT:
    torch.manual_seed(0)  # the same weights on every rank
    model = GPT(m["layers"], m["hidden"], m["heads"], m["vocab"], p=0.0)
    for layer in model.layers:
        layer.__class__ = LocalHeadsLayer
    return model.to(device)


def batch(m: dict, rank: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randint(0, m["vocab"], (m["seq"], m["batch"]), generator=g).to(device)


def loss_fn(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids)
    return F.cross_entropy(logits[:-1].flatten(0, 1).float(), ids[1:].flatten())


def wrap(model, mode: str, n: int, device):
    """DDP, FSDP2 (fully_shard per layer, then the root) or TP (Colwise qkv/fc1, Rowwise proj/fc2)."""
    if mode == "plain":
        return model
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (n,))
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    if mode == "tp":
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        if model.layers[0].a % n:
            raise ValueError(f"{model.layers[0].a} heads do not split over {n} ranks")
        plan = {"qkv": ColwiseParallel(), "proj": RowwiseParallel(), "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
        for layer in model.layers:
            parallelize_module(layer, mesh, plan)
        return model
    raise ValueError(mode)


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def grads_of(model) -> dict:
    return {name.removeprefix("module."): _full(p.grad).detach().cpu().clone()
            for name, p in model.named_parameters() if p.grad is not None}


# --------------------------------------------------------------------------- in each rank
def rank_check(rank: int, n: int, m: dict, mode: str) -> dict:
    """One forward/backward; rank 0 returns the loss and the full gradients (after DDP's averaging, FSDP's
    reduce-scatter, or TP's all-reduces)."""
    import torch.distributed as dist

    device = torch.device("cuda", rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    model = wrap(build(m, device), mode, n, device)
    ids = batch(m, 0 if mode == "tp" else rank, device)  # TP: every rank sees the same batch
    loss = loss_fn(model, ids)
    loss.backward()
    g = grads_of(model)
    w = getattr(model, "module", model).layers[0].qkv.weight
    shard = tuple((w.to_local() if hasattr(w, "to_local") else w).shape)  # FSDP: rows/n, TP: rows/n, DDP: all
    return {"loss": loss.item(), "local_qkv_shape": shard, "grads": {k: v.numpy() for k, v in g.items()}} if rank == 0 else {}


def reference_grads(m: dict, n: int, mode: str) -> tuple[float, dict]:
    """The single-process run: rank r's batches concatenated (DDP, FSDP) or rank 0's batch (TP)."""
    model = build(m, torch.device("cpu"))
    ids = batch(m, 0, "cpu") if mode == "tp" else torch.cat([batch(m, r, "cpu") for r in range(n)], dim=1)
    loss = loss_fn(model, ids)
    loss.backward()
    return loss.item(), {k: v.numpy() for k, v in grads_of(model).items()}


def _comm_time_s(prof, cuda: bool) -> float:
    """Seconds of communication in a profile: the NCCL kernels' own intervals on the GPU (kernels on
    different streams that overlap are both counted), the gloo collectives' CPU events on gloo."""
    total = 0.0
    for e in prof.events():
        name = e.name.lower()
        if cuda and e.device_type == torch.autograd.DeviceType.CUDA and "nccl" in name:
            total += e.time_range.elapsed_us() * 1e-6
        elif not cuda and e.device_type == torch.autograd.DeviceType.CPU and name.startswith("gloo:"):
            total += e.time_range.elapsed_us() * 1e-6
    return total


def rank_scale(rank: int, n: int, cfg: dict) -> dict:
    """Time `steps` training steps of `mode` after `warmup`; profile 2 steps for the communication share."""
    import torch.distributed as dist

    cuda = cfg["backend"] == "nccl"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    m, mode = cfg["model"], cfg["mode"]
    model = wrap(build(m, device), mode, n, device)
    # foreach kernels refuse a mix of DTensor (sharded) and plain (replicated) parameters: TP steps one by one
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=mode != "tp")
    ids = batch(m, 0 if mode in ("tp", "plain") else rank, device)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step(ctx=None):
        with ctx() if ctx is not None else contextlib.nullcontext():  # DDP's no_sync must cover the forward too
            with amp:
                loss = loss_fn(model, ids)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def timed(k, ctx=None):
        for _ in range(cfg["warmup"]):
            step(ctx)
        sync()
        if dist.is_initialized():
            dist.barrier()
        t0 = time.perf_counter()
        for _ in range(k):
            step(ctx)
        sync()
        return (time.perf_counter() - t0) / k

    t_step = timed(cfg["steps"])
    out = {"step_s": t_step}
    if mode == "ddp":
        out["step_no_sync_s"] = timed(cfg["steps"], model.no_sync)
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(2):
            step()
        sync()
    out["comm_s_per_step"] = _comm_time_s(prof, cuda) / 2
    if cuda:
        out["max_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    return out


# --------------------------------------------------------------------------- orchestration
def _plain_entry(rank, n, cfg):
    return rank_scale(rank, n, dict(cfg, mode="plain"))


def _fn(name):
    import importlib

    return getattr(importlib.import_module("bench.scaling"), name)


def check_grads(n: int, m: dict, modes, timeout: float = 120.0, backend: str = "gloo") -> list[dict]:
    """Gradients (and TP's loss) against the single-process float32 run on the CPU, on n ranks: gloo (relative
    tolerance 1e-5: only the order of the additions differs) or NCCL (1e-4: GPU kernels sum in other orders)."""
    tol = 1e-5 if backend == "gloo" else 1e-4
    import numpy as np

    rows = []
    for mode in modes:
        if mode == "tp" and m["heads"] % n:
            rows.append({"mode": mode, "n": n, "ok": None, "reason": "heads do not split"})
            continue
        got = spawn(_fn("rank_check"), n, backend, dict(ALWAYS_ENV), m, mode, timeout=timeout)[0]
        ref_loss, ref = reference_grads(m, n, mode)
        worst = max(float(np.max(np.abs(got["grads"][k] - ref[k])) / (float(np.max(np.abs(ref[k]))) + 1e-12)) for k in ref)
        same_keys = set(got["grads"]) == set(ref)
        ok = same_keys and worst < tol and (mode != "tp" or abs(got["loss"] - ref_loss) < tol * abs(ref_loss))
        rows.append({"mode": mode, "n": n, "backend": backend, "tolerance": tol, "ok": bool(ok), "max_rel_grad_diff": worst, "loss": got["loss"],
                     "local_qkv_shape": list(got["local_qkv_shape"]),
                     "ref_loss": ref_loss, "params": len(ref)})
    return rows


def measure(n: int, cfg: dict, modes, log=print) -> list[dict]:
    rows = []
    for mode in ["plain"] if n == 1 else modes:
        if mode == "tp" and cfg["model"]["heads"] % n:
            rows.append({"mode": mode, "n": n, "status": "skipped", "reason": "heads do not split over n"})
            continue
        try:
            fn = _fn("_plain_entry") if mode == "plain" else _fn("rank_scale")
            args = (cfg,) if mode == "plain" else (dict(cfg, mode=mode),)
            res = spawn(fn, n, cfg["backend"], dict(ALWAYS_ENV), *args, timeout=cfg["timeout"])
        except RuntimeError as exc:
            rows.append({"mode": mode, "n": n, "status": "failed", "error": str(exc)[-2000:]})
            log(f"n={n} {mode}: FAILED {str(exc)[-300:]}")
            continue
        m = cfg["model"]
        step = max(r["step_s"] for r in res)
        tokens = m["seq"] * m["batch"] * (1 if mode in ("tp", "plain") else n)
        row = {"mode": mode, "n": n, "status": "ok", "step_s": step, "step_s_ranks": [r["step_s"] for r in res],
               "tokens_per_step": tokens, "tokens_per_s": tokens / step,
               "comm_s_per_step": max(r["comm_s_per_step"] for r in res)}
        row["comm_share"] = row["comm_s_per_step"] / step
        if mode == "ddp":
            no_sync = max(r["step_no_sync_s"] for r in res)
            row.update({"step_no_sync_s": no_sync, "exposed_comm_share": max(0.0, step - no_sync) / step})
        if "max_memory_bytes" in res[0]:
            row["max_memory_bytes"] = max(r["max_memory_bytes"] for r in res)
        rows.append(row)
        log(f"n={n} {mode:5s} step {step * 1e3:9.2f} ms  {row['tokens_per_s']:12,.0f} tokens/s  "
            f"comm {100 * row['comm_share']:5.1f}%")
    return rows


def efficiency(rows: list[dict]) -> None:
    """Add scaling_efficiency to each row, against the plain 1-device run among the rows."""
    base = next((r for r in rows if r["mode"] == "plain" and r["status"] == "ok"), None)
    for r in rows:
        if base and r["status"] == "ok":
            r["scaling_efficiency"] = r["tokens_per_s"] / (r["n"] * base["tokens_per_s"]) if r["mode"] != "tp" \
                else (r["tokens_per_s"] / base["tokens_per_s"]) / r["n"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1,2,4,8")
    ap.add_argument("--cpu", type=int, default=0, metavar="N")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--check-only", action="store_true", help="with --cpu: only the gradient check")
    ap.add_argument("--no-check", action="store_true", help="GPU: skip the gradient check on the tiny model")
    ap.add_argument("--out", default=None)
    for k in GPU_MODEL:
        ap.add_argument(f"--{k}", type=int, default=None)
    args = ap.parse_args(argv)
    modes = [x for x in args.modes.split(",") if x]
    cpu = args.cpu > 0
    model = dict(CPU_MODEL if cpu else GPU_MODEL)
    model.update({k: getattr(args, k) for k in GPU_MODEL if getattr(args, k) is not None})
    if cpu:
        if not args.out and not args.check_only:
            ap.error("--cpu needs --out (CPU records are never written under data/records)")
        checks = check_grads(args.cpu, model, modes, timeout=args.timeout or 120.0)
        for c in checks:
            print(f"check n={c['n']} {c['mode']:5s}: {'OK' if c['ok'] else 'FAILED' if c['ok'] is False else 'skipped'}"
                  + (f"  max relative gradient difference {c['max_rel_grad_diff']:.1e}" if 'max_rel_grad_diff' in c else ""))
        if args.check_only:
            print(json.dumps(checks))
            return 0 if all(c["ok"] is not False for c in checks) else 1
        counts, backend = sorted({1, args.cpu}), "gloo"
    else:
        if not torch.cuda.is_available():
            print("python -m bench.scaling needs NVIDIA GPUs, and none is visible here. Nothing was measured.")
            return 2
        have = torch.cuda.device_count()
        counts, backend = [g for g in (int(x) for x in args.gpus.split(",")) if g <= have], "nccl"
        if 1 not in counts:
            counts = [1] + counts  # the baseline of the efficiencies
        checks = [] if args.no_check or max(counts) < 2 else \
            check_grads(max(counts), dict(CPU_MODEL, heads=max(8, max(counts)), hidden=64), modes, backend="nccl")
        for c in checks:
            print(f"check n={c['n']} {c['mode']:5s} (NCCL, tiny model): {'OK' if c['ok'] else 'FAILED'}")
    cfg = {"backend": backend, "model": model, "steps": args.steps or (3 if cpu else 20),
           "warmup": args.warmup or (1 if cpu else 5), "timeout": args.timeout or (120.0 if cpu else 240.0)}
    os.environ.update(ALWAYS_ENV)
    prov = _provenance(not cpu, argv, dict(ALWAYS_ENV))
    prov["command"] = " ".join(["python -m bench.scaling", *argv])
    rows = []
    for n in counts:
        rows += measure(n, cfg, modes)
    efficiency(rows)
    slug = None
    if not cpu:
        from bench.provenance import gpu_slug

        slug = gpu_slug(prov["gpu"])
    out_root = Path(args.out) if args.out else ROOT / "data" / "records"
    for n in counts:
        folder = out_root / (f"{slug}-x{n}" if slug else f"cpu-gloo-x{n}")
        folder.mkdir(parents=True, exist_ok=True)
        rec = {"schema": SCHEMA_VERSION, "experiment": "scaling", "backend": backend, "n_ranks": n,
               "model": model, "steps": cfg["steps"], "warmup": cfg["warmup"],
               "precision": "bf16 autocast" if not cpu else "float32",
               "timing": "wall time over steps after warm-up, synchronised, max over ranks; comm share: profiler "
                         "time of the collectives over the step time",
               "baseline": next((r for r in rows if r["mode"] == "plain"), None),
               "results": [r for r in rows if r["n"] == n], "checks": checks, "provenance": prov}
        (folder / "scaling.json").write_text(json.dumps(rec, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"record written: {folder / 'scaling.json'}")
    print(f"\n{'mode':6s} {'n':>2s} {'tokens/s':>12s} {'efficiency':>10s} {'comm share':>10s}")
    for r in rows:
        if r["status"] == "ok":
            print(f"{r['mode']:6s} {r['n']:2d} {r['tokens_per_s']:12,.0f} {100 * r.get('scaling_efficiency', float('nan')):9.1f}% "
                  f"{100 * r['comm_share']:9.1f}%")
    bad = any(r["status"] == "failed" for r in rows) or (checks and any(c["ok"] is False for c in checks))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
