"""Pipeline-parallel schedules (GPipe, 1F1B, interleaved 1F1B) executed for real on gloo ranks.

Every forward/backward is real autograd work on real tensors sent between ranks, so the gradients can be
checked against a single process. Time is a LOGICAL clock (a forward of one stage costs t_f, a backward
t_b): each message carries the sender's finish time and an op starts at max(rank free, inputs arrived).
The idle fraction is then a property of the schedule, not of the (shared, noisy) CPU.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


# --8<-- [start:schedules]
def gpipe_order(p: int, m: int, rank: int, v: int = 1) -> list[tuple[str, int, int]]:
    """All forwards, then all backwards (reverse order). Ops are (kind, microbatch, chunk)."""
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]


def one_f_one_b_order(p: int, m: int, rank: int, v: int = 1) -> list[tuple[str, int, int]]:
    """PipeDream-flush / 1F1B: p-1-rank warm-up forwards, then alternate one forward and one backward."""
    warm = min(p - 1 - rank, m)
    ops = [("F", i, 0) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            ops.append(("F", f, 0))
            f += 1
        ops.append(("B", b, 0))
        b += 1
    return ops


def interleaved_order(p: int, m: int, rank: int, v: int = 2) -> list[tuple[str, int, int]]:
    """Megatron's interleaved 1F1B: rank r holds chunks c = 0..v-1 (stage c*p + r); m % p == 0.
    The k-th forward is microbatch (k // (p v)) p + k % p of chunk (k // p) % v; backwards mirror it."""
    assert m % p == 0
    total = m * v
    fwd = [("F", (k // (p * v)) * p + k % p, (k // p) % v) for k in range(total)]
    bwd = [("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v) for k in range(total)]
    warm = min((p - rank - 1) * 2 + (v - 1) * p, total)
    ops, f, b = fwd[:warm], warm, 0
    while b < total:
        if f < total:
            ops.append(fwd[f])
            f += 1
        ops.append(bwd[b])
        b += 1
    return ops
# --8<-- [end:schedules]


SCHEDULES = {"gpipe": (gpipe_order, 1), "1f1b": (one_f_one_b_order, 1), "interleaved": (interleaved_order, 2)}


def make_stages(n_stages: int, width: int = 16, seed: int = 0) -> list[nn.Module]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n_stages)]


def make_batches(m: int, mb: int = 2, width: int = 16):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(mb, width, generator=g, dtype=torch.float64) for _ in range(m)], \
           [torch.randn(mb, width, generator=g, dtype=torch.float64) for _ in range(m)]


# --8<-- [start:executor]
def run_schedule(name: str, p: int, m: int, t_f: float = 1.0, t_b: float = 2.0):
    """Execute one schedule on this rank. A stage's op costs t_f / v and t_b / v (a chunk is 1/v of a stage)."""
    torch.set_default_dtype(torch.float64)
    order_fn, v = SCHEDULES[name]
    rank, n_st = dist.get_rank(), p * v
    stages = make_stages(n_st)
    xs, ys = make_batches(m)
    tag = lambda kind, i, s: (i * n_st + s) * 2 + (kind == "B")
    clock, stash, peak, timeline, reqs, losses = 0.0, {}, 0, [], [], []
    for kind, i, c in order_fn(p, m, rank, v):
        s = c * p + rank  # global stage index of this chunk
        if kind == "F":
            if s == 0:
                inp, ready = xs[i].clone(), 0.0
            else:
                buf = torch.empty(xs[i].numel() + 1)
                dist.recv(buf, (s - 1) % p, tag=tag("F", i, s - 1))
                inp, ready = buf[:-1].view_as(xs[i]), float(buf[-1])
            inp.requires_grad_(True)
            out = stages[s](inp)
            start = max(clock, ready)
            clock = start + t_f / v
            stash[(i, c)] = (inp, out)  # activations kept alive until this micro-batch's backward
            peak = max(peak, len(stash))
            if s == n_st - 1:
                losses.append(((out - ys[i]) ** 2).mean() / m)
            else:
                reqs.append(dist.isend(torch.cat([out.detach().reshape(-1), torch.tensor([clock])]),
                                       (s + 1) % p, tag=tag("F", i, s)))
        else:
            inp, out = stash.pop((i, c))
            if s == n_st - 1:
                ready = clock
                ((out - ys[i]) ** 2).mean().div(m).backward()
            else:
                buf = torch.empty(out.numel() + 1)
                dist.recv(buf, (s + 1) % p, tag=tag("B", i, s + 1))
                ready = float(buf[-1])
                out.backward(buf[:-1].view_as(out))
            start = max(clock, ready)
            clock = start + t_b / v
            if s > 0:
                reqs.append(dist.isend(torch.cat([inp.grad.reshape(-1), torch.tensor([clock])]),
                                       (s - 1) % p, tag=tag("B", i, s)))
        timeline.append((kind, i, c, start, clock))
    for r in reqs:
        r.wait()
    grads = {c * p + rank: [q.grad.clone().numpy() for q in stages[c * p + rank].parameters()] for c in range(v)}
    return {"timeline": timeline, "peak": peak, "grads": grads, "v": v,
            "loss": float(sum(l.detach() for l in losses)) if losses else None}
# --8<-- [end:executor]


def reference_grads(p: int, m: int, v: int):
    """The unsplit model's gradients in float64; runs in the caller's process, so the caller's
    default dtype is restored afterwards."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _reference_grads(p, m, v)
    finally:
        torch.set_default_dtype(before)


def _reference_grads(p: int, m: int, v: int):
    stages = make_stages(p * v)
    xs, ys = make_batches(m)
    total = 0.0
    for x, y in zip(xs, ys):
        h = x
        for st in stages:
            h = st(h)
        loss = ((h - y) ** 2).mean() / m
        loss.backward()
        total += float(loss.detach())
    return {s: [q.grad.clone().numpy() for q in st.parameters()] for s, st in enumerate(stages)}, total


def worker_pipeline(rank, world, m=8, t_f=1.0, t_b=2.0):
    out = {}
    for name in SCHEDULES:
        dist.barrier()
        out[name] = run_schedule(name, world, m, t_f, t_b)
    return out


# --8<-- [start:formulas]
def bubble_ratio(p: int, m: int, v: int = 1) -> float:
    """Idle time / useful time of GPipe and 1F1B (v = 1) and of interleaved 1F1B (v chunks per rank)."""
    return (p - 1) / (v * m)


def idle_fraction(p: int, m: int, v: int = 1) -> float:
    """Idle time / total time = (p-1) / (v m + p - 1)."""
    return (p - 1) / (v * m + p - 1)


def peak_microbatches_in_flight(schedule: str, p: int, m: int, rank: int, v: int = 1) -> float:
    """Stored activations at the peak, in units of one micro-batch through one full stage (v chunks)."""
    if schedule == "gpipe":
        return m
    if schedule == "1f1b":
        return min(p - rank, m)
    warm = min((p - rank - 1) * 2 + (v - 1) * p, m * v)  # interleaved: chunks of 1/v of a stage
    return (warm + 1) / v
# --8<-- [end:formulas]


def measured(timeline_by_rank):
    """Per-rank idle fraction over the makespan, and total idle / total busy."""
    end = max(t[-1][4] for t in timeline_by_rank)
    busy = [sum(e - s for _, _, _, s, e in t) for t in timeline_by_rank]
    idle = [1 - b / end for b in busy]
    return idle, sum(end - b for b in busy) / sum(busy), end
