"""NCCL collectives measured the way nccl-tests measures them, and the alpha-beta model fitted to them.

`python -m bench.collectives [--gpus 1,2,4,8] [--ops ...] [--min-bytes 8] [--max-bytes 4G]
[--algos Ring,Tree] [--protos Simple,LL,LL128] [--iters 20] [--warmup 5] [--out DIR]`

For every GPU count available it spawns one process per GPU (NCCL, ``device_id`` set, NVLink multicast
off: NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 in every child), sweeps the message size
by powers of two, checks every operation's result on rank-dependent integer inputs whose exact result is
known (before timing it), then times it. The sweep runs once with NCCL's own choice and once per
NCCL_ALGO x NCCL_PROTO combination, each in fresh processes (NCCL reads them when a communicator is
created); an operation NCCL refuses under a combination is recorded as not available.

Conventions taken from NVIDIA/nccl-tests (src/common.cu, src/*.cu, doc/PERFORMANCE.md):
- S, the size of an operation, is the buffer size nccl-tests prints: all-reduce and broadcast the
  per-rank buffer; all-gather, reduce-scatter and all-to-all the whole (concatenated) buffer, whose
  per-rank part is rounded down to a multiple of 16 bytes (`(count/nranks) & ~(16/eltSize-1)`).
- time: the iterations are launched back to back after a warm-up and a barrier, and the elapsed time
  divided by their number (here with CUDA events around the loop); across ranks nccl-tests reports the
  AVERAGE by default (`-a 1`; `-a 3` gives the max). `time_us` is that average, `time_us_max` the max.
- algbw = S / t (GB/s = 1e9 B/s), busbw = algbw x factor: 2(n-1)/n for all-reduce, (n-1)/n for
  all-gather, reduce-scatter and all-to-all, 1 for broadcast (code/runtime/collectives.py BUSBW_FACTOR).

`--cpu N` runs the same code on N gloo ranks on loopback (perf_counter after a barrier, sizes capped at
64 MiB): it tests the whole path; its timings are CPU timings, never GPU figures, and are written only
to --out. `--fit DIR` prints the alpha-beta fit of the records under DIR.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "code" / "runtime"))
sys.path.insert(0, str(ROOT / "code" / "framework"))

from collectives import BUSBW_FACTOR, model_time  # noqa: E402  (code/runtime/collectives.py)
from dist_launch import free_port  # noqa: E402  (code/framework/dist_launch.py)

SCHEMA_VERSION = 1
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
MODEL_NAME = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
              "all_to_all": "alltoall", "broadcast": "broadcast"}
ALGOS, PROTOS = ("Ring", "Tree"), ("Simple", "LL", "LL128")
ALWAYS_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
CPU_MAX_BYTES = 64 * 2**20
ELT = 4  # float32, as nccl-tests' default -d float
CHUNK = 1 << 25  # elements filled/checked per piece (bounded temporaries even for 4 GiB buffers)
PERIOD = 251


def busbw_factor(op: str, n: int) -> float:
    return BUSBW_FACTOR[MODEL_NAME[op]](n)


def parse_bytes(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from min to max bytes (min rounded up to a power of two)."""
    s = 1 << max(0, math.ceil(math.log2(max(1, min_bytes))))
    out = []
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def geometry(op: str, size: int, n: int) -> tuple[int, int, int]:
    """(input numel, output numel, S in bytes) for a requested size, as nccl-tests lays its buffers out."""
    count = size // ELT
    if op in ("all_reduce", "broadcast"):
        return count, count, count * ELT
    base = (count // n) & ~(16 // ELT - 1)
    if op == "all_gather":
        return base, base * n, base * n * ELT
    if op == "reduce_scatter":
        return base * n, base, base * n * ELT
    return base * n, base * n, base * n * ELT  # all_to_all


# ---------------------------------------------------------------- inputs and their exact results
def _pat(idx):
    return (idx % PERIOD + 1)


def input_fn(op: str, rank: int, n: int, base: int):
    """Value of input element i on `rank` (integers < 2**24 in float32: every sum is exact in any order)."""
    if op in ("all_reduce", "reduce_scatter"):
        return lambda i: (rank + 1) * _pat(i)
    if op == "broadcast":
        return (lambda i: _pat(i)) if rank == 0 else (lambda i: 0 * i - 1)
    if op == "all_gather":
        return lambda i: rank * 256 + _pat(i)
    return lambda i: (rank * n + i // base) * 256 + _pat(i % base)  # all_to_all: block j goes to rank j


def expected_fn(op: str, rank: int, n: int, base: int):
    tri = n * (n + 1) // 2
    if op == "all_reduce":
        return lambda i: tri * _pat(i)
    if op == "reduce_scatter":
        return lambda i: tri * _pat(rank * base + i)
    if op == "broadcast":
        return lambda i: _pat(i)
    if op == "all_gather":
        return lambda i: (i // base) * 256 + _pat(i % base)
    return lambda i: ((i // base) * n + rank) * 256 + _pat(i % base)  # block j came from rank j


def fill(buf, fn) -> None:
    import torch

    for lo in range(0, buf.numel(), CHUNK):
        hi = min(buf.numel(), lo + CHUNK)
        buf[lo:hi] = fn(torch.arange(lo, hi, device=buf.device)).to(buf.dtype)


def count_wrong(buf, fn) -> int:
    import torch

    wrong = 0
    for lo in range(0, buf.numel(), CHUNK):
        hi = min(buf.numel(), lo + CHUNK)
        wrong += int((buf[lo:hi] != fn(torch.arange(lo, hi, device=buf.device)).to(buf.dtype)).sum())
    return wrong


# ---------------------------------------------------------------- one rank
def _all_gather(out, inp, group=None) -> None:
    import torch.distributed as dist

    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp, group=group)


def _call(op: str, inp, out, group) -> None:
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(inp, group=group)
    elif op == "broadcast":
        dist.broadcast(inp, src=0, group=group)
    elif op == "all_gather":  # *_single are the names of torch >= 2.13; *_tensor before
        _all_gather(out, inp, group=group)
    elif op == "reduce_scatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp, group=group)
    else:
        dist.all_to_all_single(out, inp, group=group)


def rank_sweep(rank: int, n: int, cfg: dict) -> dict:
    """Run inside each rank: check, warm up and time every (op, size). Rank 0 returns the results."""
    import torch
    import torch.distributed as dist

    cuda = cfg["backend"] == "nccl"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results, not_available, skipped, errors = [], [], [], []

    def gather_float(x: float) -> list[float]:
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        out = torch.empty(n, dtype=torch.float64, device=dev)
        _all_gather(out, t)
        return out.tolist()

    progress = Path(cfg["progress"]) if rank == 0 and cfg.get("progress") else None
    for op in cfg["ops"]:
        if progress:  # the parent reads this if the processes die (it then knows which op killed them)
            with progress.open("a") as f:
                f.write(json.dumps({"start": op}) + "\n")
        if rank == n - 1 and op in cfg.get("inject_crash", ()):  # tests: a rank dying inside an op
            os._exit(3)
        group = dist.new_group(list(range(n)))  # a communicator of its own: an error cannot spoil the next op
        for k, size in enumerate(cfg["sizes"]):
            numel_in, numel_out, S = geometry(op, size, n)
            if numel_in == 0 or numel_out == 0:
                skipped.append({"op": op, "size": size, "reason": "less than 16 bytes per rank (nccl-tests rounds down)"})
                continue
            base = numel_out if op == "reduce_scatter" else (numel_in // n if op == "all_to_all" else numel_in)
            try:
                if k == 0 and op in cfg.get("inject_refusal", ()):  # tests: stands in for NCCL refusing a forced combination
                    raise RuntimeError(f"injected refusal of {op}")
                inp = torch.empty(numel_in, dtype=torch.float32, device=dev)
                out = inp if op in ("all_reduce", "broadcast") else torch.empty(numel_out, dtype=torch.float32, device=dev)
                fill(inp, input_fn(op, rank, n, base))
                if out is not inp:
                    out.fill_(-7.0)  # poisoned: a skipped write shows up as wrong elements
                sync()
                _call(op, inp, out, group)
                sync()
            except Exception as exc:  # noqa: BLE001 - NCCL refusing a forced algorithm/protocol lands here
                msg = f"{type(exc).__name__}: {exc}"[:600]
                (not_available if k == 0 else errors).append({"op": op, "size": size, "reason": msg})
                break
            wrong = count_wrong(out, expected_fn(op, rank, n, base))
            wrong_all = int(sum(gather_float(float(wrong))))
            row = {"op": op, "size": size, "bytes": S, "numel_in": numel_in, "numel_out": numel_out,
                   "check": {"ran": True, "wrong_elements": wrong_all}}
            if wrong_all:
                errors.append({"op": op, "size": size, "reason": f"{wrong_all} wrong elements: not timed"})
                results.append(row)
                continue
            for _ in range(cfg["warmup"]):
                _call(op, inp, out, group)
            sync()
            dist.barrier(group=group)
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(cfg["iters"]):
                    _call(op, inp, out, group)
                end.record()
                end.synchronize()
                t = start.elapsed_time(end) / 1e3 / cfg["iters"]
            else:
                t0 = time.perf_counter()
                for _ in range(cfg["iters"]):
                    _call(op, inp, out, group)
                t = (time.perf_counter() - t0) / cfg["iters"]
            ranks = gather_float(t)
            t_avg, t_max = sum(ranks) / n, max(ranks)
            algbw = S / t_avg / 1e9
            row.update({"time_us": t_avg * 1e6, "time_us_max": t_max * 1e6, "time_us_ranks": [r * 1e6 for r in ranks],
                        "algbw_gbps": algbw, "busbw_factor": busbw_factor(op, n), "busbw_gbps": algbw * busbw_factor(op, n)})
            results.append(row)
            del inp, out
        try:
            dist.destroy_process_group(group)
        except Exception:  # noqa: BLE001
            pass
        if cuda:
            torch.cuda.empty_cache()
        if progress:
            with progress.open("a") as f:
                f.write(json.dumps({"done": op, "results": [r for r in results if r["op"] == op],
                                    "skipped": [x for x in skipped if x["op"] == op],
                                    "not_available": [x for x in not_available if x["op"] == op],
                                    "errors": [x for x in errors if x["op"] == op]}) + "\n")
    return {"results": results, "not_available": not_available, "skipped": skipped, "errors": errors} if rank == 0 \
        else {"not_available": not_available, "errors": errors}


# ---------------------------------------------------------------- processes
def _entry(fn, rank, n, port, queue, backend, env, args):
    os.environ.update(env)
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch
    import torch.distributed as dist

    try:
        kw = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kw["device_id"] = torch.device("cuda", rank)
        else:
            torch.set_num_threads(1)
        dist.init_process_group(backend, rank=rank, world_size=n, timeout=dt.timedelta(seconds=120), **kw)
        queue.put((rank, True, fn(rank, n, *args)))
    except BaseException:  # noqa: BLE001 - report to the parent instead of hanging it
        queue.put((rank, False, traceback.format_exc()[-3000:]))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def spawn(fn, n: int, backend: str, env: dict, *args, timeout: float = 600.0) -> list:
    """Run fn(rank, n, *args) on n fresh processes; return the payloads by rank. Raises on a failure or a
    timeout, after killing every child still alive (by its own pid)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, n, port, queue, backend, env, args), daemon=True)
             for r in range(n)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    results, errors = {}, []
    try:
        while len(results) + len(errors) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                errors.append(f"timeout after {timeout:.0f} s")
                break
            try:
                rank, ok, payload = queue.get(timeout=min(left, 1.0))
            except Exception:  # noqa: BLE001 - queue.Empty: look whether a child died
                if any(p.exitcode not in (None, 0) for p in procs) and queue.empty():
                    errors.append("a rank died: exit codes " + str([p.exitcode for p in procs]))
                    break
                continue
            if ok:
                results[rank] = payload
            else:
                errors.append(f"rank {rank}:\n{payload}")
                break
    finally:
        grace = 1.0 if errors else 15.0  # after a failure the other ranks may be stuck in a collective
        for p in procs:
            p.join(timeout=max(0.1, min(grace, deadline - time.monotonic())))
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, 9)
                p.join(timeout=5)
        queue.close()
    if errors:
        raise RuntimeError("\n".join(errors))
    return [results[r] for r in range(n)]


# ---------------------------------------------------------------- provenance and records
def _topology() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
        return out.stdout if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _provenance(cuda: bool, argv: list[str], env: dict) -> dict:
    import torch

    command = " ".join(["python -m bench.collectives", *argv])
    if cuda:
        from bench.provenance import provenance

        prov = provenance(torch, argv)
        v = torch.cuda.nccl.version()
        prov["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        prov["gpu_count_visible"] = torch.cuda.device_count()
        prov["topology"] = _topology()
    else:
        from bench.provenance import _commit

        prov = {"gpu": None, "cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
                "packages": {"torch": torch.__version__}, "commit": _commit(),
                "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()}
    prov["command"] = command
    prov["environment"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_NCCL", "TORCH_SYMM", "CUDA_VISIBLE"))} | env
    return prov


def _worker():
    """rank_sweep by its importable name (not __main__'s), so that spawned children find it."""
    import importlib

    return importlib.import_module("bench.collectives").rank_sweep


def _sweep(n: int, backend: str, env: dict, cfg: dict, timeout: float) -> dict:
    """Run the sweep; if the processes die or hang in an op, keep what the ops before it measured (from
    rank 0's progress file), record that op as failed, and go on with the next ops in fresh processes."""
    import tempfile

    out = {"results": [], "not_available": [], "skipped": [], "errors": [], "failed_ops": []}
    remaining = list(cfg["ops"])
    with tempfile.TemporaryDirectory(prefix="bench-coll-") as tmp:
        attempt = 0
        while remaining:
            attempt += 1
            progress = Path(tmp) / f"progress-{attempt}.jsonl"
            try:
                payloads = spawn(_worker(), n, backend, env, dict(cfg, ops=remaining, progress=str(progress)),
                                 timeout=timeout)
            except RuntimeError as exc:
                lines = [json.loads(x) for x in progress.read_text().splitlines()] if progress.exists() else []
                done = [x for x in lines if "done" in x]
                for x in done:
                    for key in ("results", "skipped", "not_available", "errors"):
                        out[key] += x[key]
                started = [x["start"] for x in lines if "start" in x]
                culprit = started[-1] if len(started) > len(done) else remaining[len(done)]
                out["failed_ops"].append({"op": culprit, "reason": str(exc)[-2000:]})
                remaining = remaining[remaining.index(culprit) + 1:]
                continue
            first = payloads[0]
            na = {row["op"]: row for p in payloads for row in p["not_available"]}
            for key in ("results", "skipped"):
                out[key] += first[key]
            out["not_available"] += list(na.values())
            out["errors"] += [e for p in payloads for e in p["errors"]]
            remaining = []
    return out


def measure(n: int, backend: str, cfg: dict, combos: list, timeout: float, log=print) -> list[dict]:
    """One run per (NCCL_ALGO, NCCL_PROTO) combination, each in fresh processes; (None, None) = NCCL's choice."""
    runs = []
    for algo, proto in combos:
        env = dict(ALWAYS_ENV)
        if algo:
            env["NCCL_ALGO"] = algo
        if proto:
            env["NCCL_PROTO"] = proto
        log(f"n={n} NCCL_ALGO={algo or 'default'} NCCL_PROTO={proto or 'default'} ...")
        t0 = time.monotonic()
        got = _sweep(n, backend, env, {k: v for k, v in cfg.items() if k != "progress"}, timeout)
        run = {"algo": algo, "proto": proto, "env": env,
               "status": "ok" if not got["failed_ops"] else "partial",
               "seconds": round(time.monotonic() - t0, 1), "sizes": cfg["sizes"], "iters": cfg["iters"],
               "warmup": cfg["warmup"], "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
               **got}
        na = {x["op"]: x for x in got["not_available"]}
        failed = {x["op"]: x for x in got["failed_ops"]}
        for op in cfg["ops"]:
            rows = [r for r in got["results"] if r["op"] == op and "time_us" in r]
            if op in na:
                log(f"  {op:15s} not available: {na[op]['reason'][:150]}")
            elif op in failed:
                log(f"  {op:15s} FAILED (processes died or hung): {failed[op]['reason'][-200:]}")
            elif rows:
                big = rows[-1]
                log(f"  {op:15s} {len(rows):2d} sizes checked and timed; at {big['bytes']:>12,d} B: "
                    f"{big['time_us']:10.1f} us  algbw {big['algbw_gbps']:8.2f}  busbw {big['busbw_gbps']:8.2f} GB/s")
        runs.append(run)
    return runs


def record_for(n: int, backend: str, cfg: dict, runs: list, prov: dict, slug: str | None) -> dict:
    return {"schema": SCHEMA_VERSION, "experiment": "collectives", "backend": backend, "n_ranks": n,
            "gpu_slug": slug, "dtype": "float32", "ops": list(cfg["ops"]), "sizes_requested": cfg["sizes"],
            "timing": {"method": "CUDA events around iters back-to-back calls" if backend == "nccl"
                       else "time.perf_counter around iters calls (CPU gloo: not a GPU figure)",
                       "warmup": cfg["warmup"], "iters": cfg["iters"],
                       "statistic": "per rank: elapsed / iters; time_us = average over ranks (nccl-tests default -a 1), "
                                    "time_us_max = max over ranks (-a 3)"},
            "bandwidth": "algbw = bytes / time (GB/s = 1e9 B/s); busbw = algbw x busbw_factor (nccl-tests doc/PERFORMANCE.md)",
            "runs": runs, "provenance": prov}


def merge_runs(path: Path, record: dict) -> dict:
    """Keep the runs of an earlier record of the same GPU, NCCL version and rank count whose (algo, proto)
    this command did not run, so that the sweep can be split over several commands."""
    if not path.exists():
        return record
    old = json.loads(path.read_text(encoding="utf-8"))
    same = all(old.get("provenance", {}).get(k) == record["provenance"].get(k) for k in ("gpu", "nccl")) \
        and old.get("n_ranks") == record["n_ranks"] and old.get("backend") == record["backend"]
    if not same:
        return record
    ran = {(r["algo"], r["proto"]) for r in record["runs"]}
    kept = [r for r in old["runs"] if (r["algo"], r["proto"]) not in ran]
    record["runs"] = sorted(kept + record["runs"], key=lambda r: (r["algo"] or "", r["proto"] or ""))
    record["ops"] = sorted(set(record["ops"]) | set(old.get("ops", [])), key=OPS.index)
    record["earlier_commands"] = old.get("earlier_commands", []) + [old["provenance"].get("command")]
    return record


# ---------------------------------------------------------------- the alpha-beta fit
def _steps(op: str, algo: str | None, n: int) -> tuple[float, float] | None:
    """(alpha coefficient, beta coefficient) of the runtime chapter's model (code/runtime/collectives.model_time)
    for a forced Ring, and for all-to-all (grouped send/recv: pairwise exchange, NCCL_ALGO does not apply);
    None where the model has no linear form (Tree is pipelined, broadcast is not modelled, NCCL's own choice
    switches algorithm with the size)."""
    if n < 2 or op == "broadcast":
        return None
    if op == "all_to_all":
        name = "pairwise"
    elif algo == "Ring":
        name = "ring"
    else:
        return None
    coll = MODEL_NAME[op]
    return model_time(name, coll, n, 0.0, 1.0, 0.0), model_time(name, coll, n, 1.0, 0.0, 1.0)


def fit_line(sizes_b: list[float], times_s: list[float]) -> tuple[float, float]:
    """Least squares on t(S) = alpha + S * beta, each point weighted by 1/t (the relative error is minimised,
    so the microsecond points fix alpha and the millisecond points fix beta)."""
    import numpy as np

    S, t = np.asarray(sizes_b, float), np.asarray(times_s, float)
    A = np.stack([1.0 / t, S / t], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    return float(alpha), float(beta)


def nvlink_ceiling_gbps(slug: str | None) -> float | None:
    """Per-GPU one-direction NVLink bandwidth from data/hardware/gpus.yml (key nvlink_bandwidth_gbps, the
    datasheet's bidirectional figure), or None where the file does not give it."""
    if not slug:
        return None
    import yaml

    gpus = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]
    bidir = gpus.get(slug.rsplit("-x", 1)[0], {}).get("nvlink_bandwidth_gbps")
    return bidir / 2 if bidir else None


def fit(records: list[dict]) -> list[dict]:
    """Per (op, algo, proto, n): alpha, beta, the model's bandwidths, residuals in % and the NVLink ceiling."""
    rows = []
    for rec in records:
        n, ceiling = rec["n_ranks"], nvlink_ceiling_gbps(rec.get("gpu_slug"))
        for run in rec["runs"]:
            for op in rec["ops"]:
                pts = [r for r in run.get("results", []) if r["op"] == op and "time_us" in r]
                if len(pts) < 2:
                    continue
                S = [r["bytes"] for r in pts]
                t = [r["time_us"] / 1e6 for r in pts]
                alpha, beta = fit_line(S, t)
                resid = [100.0 * ((alpha + s * beta) - ti) / ti for s, ti in zip(S, t)]
                algbw = 1e-9 / beta if beta > 0 else float("inf")
                row = {"op": op, "algo": run["algo"] or "default", "proto": run["proto"] or "default", "n": n,
                       "alpha_us": alpha * 1e6, "beta_s_per_byte": beta, "model_algbw_gbps": algbw,
                       "model_busbw_gbps": algbw * busbw_factor(op, n),
                       "residuals_pct": [{"bytes": s, "pct": r} for s, r in zip(S, resid)],
                       "max_abs_residual_pct": max(abs(r) for r in resid), "nvlink_ceiling_gbps": ceiling,
                       "busbw_over_ceiling": (algbw * busbw_factor(op, n) / ceiling) if ceiling else None}
                steps = _steps(op, run["algo"], n)
                if steps:  # alpha per message step and the link bandwidth the ring model implies
                    a_coef, b_coef = steps
                    row["alpha_step_us"] = alpha * 1e6 / a_coef
                    row["link_gbps"] = b_coef / beta / 1e9 if beta > 0 else None
                rows.append(row)
    return rows


def load_records(path: Path) -> list[dict]:
    files = [path] if path.is_file() else sorted(path.rglob("collectives.json"))
    return [json.loads(f.read_text(encoding="utf-8")) for f in files]


def print_fit(rows: list[dict]) -> None:
    print(f"{'op':15s} {'algo':8s} {'proto':8s} {'n':>2s} {'alpha us':>9s} {'algbw GB/s':>11s} "
          f"{'busbw GB/s':>11s} {'max |res| %':>11s} {'a/step us':>9s} {'link GB/s':>9s} {'% NVLink':>8s}")
    for r in rows:
        ceil = f"{100 * r['busbw_over_ceiling']:7.1f}%" if r["busbw_over_ceiling"] is not None else "     n/a"
        step = f"{r['alpha_step_us']:9.2f}" if "alpha_step_us" in r else f"{'-':>9s}"
        link = f"{r['link_gbps']:9.1f}" if r.get("link_gbps") else f"{'-':>9s}"
        print(f"{r['op']:15s} {r['algo']:8s} {r['proto']:8s} {r['n']:2d} {r['alpha_us']:9.2f} "
              f"{r['model_algbw_gbps']:11.2f} {r['model_busbw_gbps']:11.2f} {r['max_abs_residual_pct']:11.1f} "
              f"{step} {link} {ceil}")
    if rows and all(r["nvlink_ceiling_gbps"] is None for r in rows):
        print("(no NVLink ceiling: CPU records, or nvlink_bandwidth_gbps missing from data/hardware/gpus.yml)")


# ---------------------------------------------------------------- command line
def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.collectives", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1,2,4,8", help="GPU counts, those above torch.cuda.device_count() are left out")
    ap.add_argument("--cpu", type=int, default=0, metavar="N", help="run on N gloo ranks on loopback instead")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="4G")
    ap.add_argument("--algos", default=None, help="NCCL_ALGO values to force (default Ring,Tree; none with --cpu)")
    ap.add_argument("--protos", default=None, help="NCCL_PROTO values to force (default Simple,LL,LL128)")
    ap.add_argument("--no-forced", action="store_true", help="only NCCL's own choice")
    ap.add_argument("--no-default", action="store_true", help="only the forced combinations")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per set of processes")
    ap.add_argument("--out", default=None, help="records folder (GPU default data/records; required with --cpu)")
    ap.add_argument("--fit", default=None, metavar="DIR", help="print the alpha-beta fit of the records under DIR")
    ap.add_argument("--merge", default=None, metavar="DIR",
                    help="merge the records under DIR (<gpu>-x<N>/collectives.json, e.g. fetched from a GPU machine) "
                         "into --out (default data/records): runs of the same (algo, proto) are replaced")
    args = ap.parse_args(argv)

    if args.merge:
        out_root = Path(args.out) if args.out else ROOT / "data" / "records"
        for src in sorted(Path(args.merge).rglob("collectives.json")):
            dst = out_root / src.parent.name / "collectives.json"
            dst.parent.mkdir(parents=True, exist_ok=True)
            merged = merge_runs(dst, json.loads(src.read_text(encoding="utf-8")))
            dst.write_text(json.dumps(merged, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            print(f"{src} -> {dst} ({len(merged['runs'])} runs)")
        return 0

    if args.fit:
        rows = fit(load_records(Path(args.fit)))
        print_fit(rows)
        return 0 if rows else 1
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if unknown := set(ops) - set(OPS):
        ap.error(f"unknown ops {sorted(unknown)}")
    cpu = args.cpu > 0
    max_bytes = parse_bytes(args.max_bytes)
    if cpu:
        if not args.out:
            ap.error("--cpu needs --out (CPU records are never written under data/records)")
        max_bytes = min(max_bytes, CPU_MAX_BYTES)
        counts, backend = [args.cpu], "gloo"
    else:
        import torch

        if not torch.cuda.is_available():
            print("python -m bench.collectives needs NVIDIA GPUs, and none is visible here. Nothing was measured.\n"
                  "Use --cpu N to run the same code on N gloo ranks.")
            return 2
        have = torch.cuda.device_count()
        counts, backend = [g for g in (int(x) for x in args.gpus.split(",")) if g <= have], "nccl"
        left = [g for g in (int(x) for x in args.gpus.split(",")) if g > have]
        if left:
            print(f"{have} GPU(s) visible: GPU counts {left} are not measured")
    forced = not args.no_forced and (not cpu or args.algos or args.protos)
    algos = (args.algos or ",".join(ALGOS)).split(",")
    protos = (args.protos or ",".join(PROTOS)).split(",")
    combos = ([] if args.no_default else [(None, None)]) + ([(a, p) for a in algos for p in protos] if forced else [])
    cfg = {"backend": backend, "ops": ops, "sizes": sizes(parse_bytes(args.min_bytes), max_bytes),
           "iters": args.iters, "warmup": args.warmup}
    timeout = args.timeout or (120.0 if cpu else 240.0)
    os.environ.update(ALWAYS_ENV)
    prov = _provenance(not cpu, argv, dict(ALWAYS_ENV))
    slug = None
    if not cpu:
        from bench.provenance import gpu_slug

        slug = gpu_slug(prov["gpu"])
    out_root = Path(args.out) if args.out else ROOT / "data" / "records"
    failed = False
    for n in counts:
        here = [c for c in combos if c == (None, None) or n > 1]  # one rank: nothing for NCCL to choose
        if not here:
            continue
        runs = measure(n, backend, cfg, here, timeout)
        failed |= any(r["status"] != "ok" or r.get("errors") for r in runs)
        rec_slug = f"{slug}-x{n}" if slug else None
        record = record_for(n, backend, cfg, runs, prov, rec_slug)
        folder = out_root / (rec_slug or f"cpu-gloo-x{n}")
        folder.mkdir(parents=True, exist_ok=True)
        record = merge_runs(folder / "collectives.json", record)
        (folder / "collectives.json").write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"record written: {folder / 'collectives.json'}")
    rows = fit([json.loads(p.read_text()) for n in counts
                if (p := out_root / (f"{slug}-x{n}" if slug else f"cpu-gloo-x{n}") / "collectives.json").exists()])
    print_fit(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
