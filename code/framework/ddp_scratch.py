"""A hand-written DistributedDataParallel: buckets, autograd hooks, ring all-reduce, no_sync, byte counting.

Run on CPU gloo ranks through dist_launch.launch; checked against torch's DistributedDataParallel and a
single-process run by notebooks/framework/ddp-from-scratch.ipynb and tests/test_framework_parallel.py.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def make_data(step: int, global_batch: int = 16):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(global_batch, 32, generator=g), torch.randint(0, 10, (global_batch,), generator=g)


# --8<-- [start:buckets]
def plan_buckets(sizes_bytes: list[int], cap_bytes: int) -> list[list[int]]:
    """Group parameter indices into buckets in REVERSE registration order (gradients of the last
    layers are ready first in backward); a bucket is closed once it holds at least cap_bytes."""
    buckets, cur, cur_bytes = [], [], 0
    for i in reversed(range(len(sizes_bytes))):
        cur.append(i)
        cur_bytes += sizes_bytes[i]
        if cur_bytes >= cap_bytes:
            buckets.append(cur)
            cur, cur_bytes = [], 0
    if cur:
        buckets.append(cur)
    return buckets
# --8<-- [end:buckets]


# --8<-- [start:ring]
def ring_allreduce_(x: torch.Tensor) -> int:
    """In-place sum all-reduce of a 1-D tensor with the ring algorithm over point-to-point send/recv.
    Returns the bytes this rank sent: reduce-scatter N-1 chunks, then all-gather N-1 chunks."""
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = list(x.tensor_split(n))
    right, left = (rank + 1) % n, (rank - 1) % n
    sent = 0
    for phase in ("reduce-scatter", "all-gather"):
        for k in range(n - 1):
            if phase == "reduce-scatter":
                send_i, recv_i = (rank - k) % n, (rank - k - 1) % n
            else:  # after reduce-scatter rank r owns the fully reduced chunk (r + 1) % n
                send_i, recv_i = (rank + 1 - k) % n, (rank - k) % n
            buf = torch.empty_like(chunks[recv_i])
            req = dist.isend(chunks[send_i].contiguous(), right)
            dist.recv(buf, left)
            req.wait()
            sent += chunks[send_i].numel() * chunks[send_i].element_size()
            if phase == "reduce-scatter":
                chunks[recv_i] += buf
            else:
                chunks[recv_i].copy_(buf)
    return sent
# --8<-- [end:ring]


# --8<-- [start:ddp]
class BucketedDDP:
    """Data parallel by hand: broadcast once, then one all-reduce per bucket, launched from the
    post-accumulate-grad hook of the last parameter that fills the bucket, overlapping the rest of backward."""

    def __init__(self, model: nn.Module, bucket_cap_bytes: int = 8192, comm: str = "gloo"):
        self.model, self.comm = model, comm
        self.params = [p for p in model.parameters() if p.requires_grad]
        for p in self.params:  # every rank starts from rank 0's weights
            dist.broadcast(p.data, src=0)
        sizes = [p.numel() * p.element_size() for p in self.params]
        self.buckets = plan_buckets(sizes, bucket_cap_bytes)
        self.bucket_of = {i: b for b, idx in enumerate(self.buckets) for i in idx}
        self.sync = True
        self.log: list[tuple] = []  # ("grad", i) / ("launch", b): the order backward produced them
        self.bytes_reduced = 0  # sum of bucket sizes handed to all-reduce (the "S" of busbw)
        self.bytes_sent = 0  # what this rank put on the wire (ring only)
        self.calls = 0
        self._reset()
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._make_hook(i))

    def _reset(self):
        self.pending = [len(b) for b in self.buckets]
        self.works: list[tuple] = []

    def _make_hook(self, i):
        def hook(p):
            self.log.append(("grad", i))
            if not self.sync:  # inside no_sync(): just let .grad accumulate locally
                return
            b = self.bucket_of[i]
            self.pending[b] -= 1
            if self.pending[b] == 0:  # bucket complete: flatten and launch its all-reduce now
                self._launch(b)
        return hook

    def _launch(self, b):
        flat = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[b]])
        self.log.append(("launch", b))
        self.calls += 1
        self.bytes_reduced += flat.numel() * flat.element_size()
        if self.comm == "ring":
            self.bytes_sent += ring_allreduce_(flat)
            work = None
        else:
            work = dist.all_reduce(flat, async_op=True)
        self.works.append((b, flat, work))

    def finish(self):
        """Call after loss.backward(): wait for the buckets, average, copy back into .grad."""
        n = dist.get_world_size()
        for b, flat, work in self.works:
            if work is not None:
                work.wait()
            flat /= n
            offset = 0
            for i in self.buckets[b]:
                g = self.params[i].grad
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
        self._reset()

    @contextlib.contextmanager
    def no_sync(self):
        self.sync = False
        try:
            yield
        finally:
            self.sync = True
# --8<-- [end:ddp]


def _grads(model):
    return [p.grad.detach().clone().numpy() for p in model.parameters()]


def _local(x, y, rank, world):
    b = x.shape[0] // world
    return x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]


def worker_compare(rank, world, bucket_cap_bytes=8192, comm="gloo", accum=2, steps=3):
    """One rank of the lab: hand DDP vs torch DDP vs a single process on the global batch."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    loss_fn = nn.CrossEntropyLoss()
    out = {}

    # 1) one step, gradients of the three implementations
    x, y = make_data(0)
    xl, yl = _local(x, y, rank, world)
    ref = make_model()
    loss_fn(ref(x), y).backward()  # single process, whole global batch
    out["grad_single"] = _grads(ref)

    mine = BucketedDDP(make_model(seed=rank * 7), bucket_cap_bytes, comm)  # ranks > 0 differ: broadcast must fix them
    loss_fn(mine.model(xl), yl).backward()
    mine.log.append(("backward_done",))
    mine.finish()
    out["grad_mine"] = _grads(mine.model)
    out["log"] = mine.log
    out["buckets"] = mine.buckets
    out["param_bytes"] = [p.numel() * p.element_size() for p in mine.params]
    out["calls"], out["bytes_reduced"], out["bytes_sent"] = mine.calls, mine.bytes_reduced, mine.bytes_sent

    ddp_buckets = []  # bytes of each bucket torch's DDP hands to its comm hook, per iteration

    def counting_hook(state, bucket):
        ddp_buckets[-1].append(bucket.buffer().numel() * bucket.buffer().element_size())
        return default_hooks.allreduce_hook(state, bucket)

    ddp = DDP(make_model(), bucket_cap_mb=bucket_cap_bytes / 2**20)
    ddp.register_comm_hook(None, counting_hook)
    for it in range(2):  # iteration 0 uses one bucket; buckets are rebuilt after it
        ddp.zero_grad(set_to_none=True)
        ddp_buckets.append([])
        loss_fn(ddp(xl), yl).backward()
        if it == 0:
            out["grad_ddp"] = _grads(ddp.module)
    out["ddp_bucket_bytes"] = ddp_buckets

    # 2) gradient accumulation: no_sync for accum-1 micro-steps, communicate on the last one
    mine2 = BucketedDDP(make_model(), bucket_cap_bytes, comm)
    ref2 = make_model()
    for k in range(accum):
        xk, yk = make_data(10 + k)
        loss_fn(ref2(xk), yk).backward()
        xkl, ykl = _local(xk, yk, rank, world)
        ctx = mine2.no_sync() if k < accum - 1 else contextlib.nullcontext()
        with ctx:
            loss_fn(mine2.model(xkl), ykl).backward()
    mine2.finish()
    out["accum_calls"], out["accum_bytes_reduced"] = mine2.calls, mine2.bytes_reduced
    out["accum_grad_mine"], out["accum_grad_single"] = _grads(mine2.model), _grads(ref2)

    # 3) a few SGD steps: replicas stay identical and follow the single-process trajectory
    mine3 = BucketedDDP(make_model(), bucket_cap_bytes, comm)
    ref3 = make_model()
    opt_m = torch.optim.SGD(mine3.model.parameters(), lr=0.1)
    opt_r = torch.optim.SGD(ref3.parameters(), lr=0.1)
    for s in range(steps):
        x, y = make_data(100 + s)
        xl, yl = _local(x, y, rank, world)
        opt_m.zero_grad()
        opt_r.zero_grad()
        loss_fn(mine3.model(xl), yl).backward()
        mine3.finish()
        opt_m.step()
        loss_fn(ref3(x), y).backward()
        opt_r.step()
    out["params_mine"] = [p.detach().numpy().copy() for p in mine3.model.parameters()]
    out["params_single"] = [p.detach().numpy().copy() for p in ref3.parameters()]

    # 4) the ring all-reduce on one flat gradient-sized buffer: same sum as gloo's, bytes counted
    torch.manual_seed(rank)
    buf = torch.randn(sum(p.numel() for p in ref.parameters()))
    expect = buf.clone()
    dist.all_reduce(expect)
    out["ring_sent"] = ring_allreduce_(buf)
    out["ring_err"] = float((buf - expect).abs().max())
    return out


def ring_bytes_formula(numel: int, world: int, elem_bytes: int = 4) -> int:
    """Bytes ALL ranks together send in one ring all-reduce of numel elements: 2 (N-1) S."""
    return 2 * (world - 1) * numel * elem_bytes


def busbw_factor(world: int) -> float:
    """nccl-tests: busbw = algbw * 2 (N-1) / N for all-reduce."""
    return 2 * (world - 1) / world


def max_abs_diff(a, b) -> float:
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b))
