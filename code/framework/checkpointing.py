"""Exact resume of sharded training through torch.distributed.checkpoint (DCP).

A small language model is trained data-parallel with a hand-written ZeRO-1 optimiser: the fp32 master
copy and Adam's two moments are split into one shard per rank and held as DTensors (Shard(0) over a 1-D
device mesh), so DCP writes each rank's shard plus a metadata file and can load them onto a different
number of ranks. Everything else that decides the next step is saved too: the step, the learning-rate
schedule, the data loader's position and shuffle RNG, and the random streams of dropout and data
augmentation. Continuing on 4, 2 or 1 ranks reproduces the uninterrupted run bit for bit because

* randomness and data are keyed by a fixed number G of micro-shards, not by rank: micro-shard m always
  gets the same windows, dropout masks and jitter, whichever rank computes it;
* gradients are summed over the G micro-shards in a fixed order (all-gather, then a sequential sum),
  never by an all-reduce whose association depends on the world size;
* Adam is written with one IEEE operation per line (no fused multiply-add), so a shard's update does
  not depend on where the shard starts.

Used by docs/framework/checkpointing.md and notebooks/framework/checkpoint-lab.ipynb; tested by
tests/test_framework_checkpointing.py.
"""
from __future__ import annotations

import math
import os
import pickle
import random
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

G = 4            # micro-shards: the unit that owns data, randomness and a gradient (world size divides G)
PAD = 256        # the flat parameter vector is padded to a multiple of this (FSDP1 pads the same way)
VOCAB, DIM, SEQ, BATCH = 32, 32, 16, 4   # BATCH windows per micro-shard per step


class TinyLM(nn.Module):
    """Embedding -> MLP with dropout -> output head. Dropout draws from an explicit generator so that
    the caller decides which random stream a micro-batch uses."""

    def __init__(self, vocab=VOCAB, dim=DIM, p=0.1):
        super().__init__()
        self.p = p
        self.embed = nn.Embedding(vocab, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, gen: torch.Generator):
        x = self.embed(ids)
        h = F.gelu(self.fc1(x))
        keep = (torch.rand(h.shape, generator=gen) >= self.p).float() / (1 - self.p)
        return self.head(x + self.fc2(h * keep))


def corpus(n=6000, vocab=VOCAB, seed=0) -> torch.Tensor:
    """A first-order Markov chain with peaked transitions (something to learn)."""
    g = torch.Generator().manual_seed(seed)
    cdf = torch.softmax(3 * torch.randn(vocab, vocab, generator=g), -1).cumsum(-1)
    u = torch.rand(n, generator=g)
    out = torch.zeros(n, dtype=torch.long)
    for i in range(1, n):
        out[i] = min(int(torch.searchsorted(cdf[out[i - 1]], u[i])), vocab - 1)
    return out


# --8<-- [start:stateful]
class Loader:
    """Shuffled windows of a token stream. Every rank runs the same loader and takes its micro-shards'
    slices, so its state (epoch, position, NumPy generator) is the same on every rank."""

    def __init__(self, n_windows: int, per_step: int, seed: int = 0):
        self.n, self.per_step = n_windows, per_step
        self.rng = np.random.default_rng(seed)
        self.epoch, self.pos = 0, 0
        self.order = self.rng.permutation(self.n)

    def next(self) -> np.ndarray:
        if self.pos + self.per_step > self.n:  # drop the ragged tail, reshuffle
            self.epoch, self.pos = self.epoch + 1, 0
            self.order = self.rng.permutation(self.n)
        idx = self.order[self.pos:self.pos + self.per_step]
        self.pos += self.per_step
        return idx

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "order": torch.from_numpy(self.order.copy()),
                "rng": pickle.dumps(self.rng.bit_generator.state)}

    def load_state_dict(self, sd: dict) -> None:
        self.epoch, self.pos = int(sd["epoch"]), int(sd["pos"])
        self.order = sd["order"].numpy().copy()
        self.rng.bit_generator.state = pickle.loads(sd["rng"])


class WarmupCosine:
    """Linear warm-up then cosine decay; the state is the number of steps taken."""

    def __init__(self, base_lr=3e-2, warmup=3, total=40, floor=0.1):
        self.base_lr, self.warmup, self.total, self.floor, self.last = base_lr, warmup, total, floor, 0

    def lr(self) -> float:
        t = self.last
        if t < self.warmup:
            return self.base_lr * (t + 1) / self.warmup
        frac = min(1.0, (t - self.warmup) / max(1, self.total - self.warmup))
        return self.base_lr * (self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * frac)))

    def step(self) -> None:
        self.last += 1

    def state_dict(self) -> dict:
        return {"last": self.last}

    def load_state_dict(self, sd: dict) -> None:
        self.last = int(sd["last"])
# --8<-- [end:stateful]


# --8<-- [start:rng]
def capture_rank_rng() -> dict:
    """Every global random stream of this process: Python, NumPy, torch CPU and (if present) CUDA."""
    out = {"python": pickle.dumps(random.getstate()), "numpy": pickle.dumps(np.random.get_state()),
           "torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["torch_cuda"] = torch.stack(torch.cuda.get_rng_state_all())
    return out


def restore_rank_rng(sd: dict) -> None:
    random.setstate(pickle.loads(sd["python"]))
    np.random.set_state(pickle.loads(sd["numpy"]))
    torch.set_rng_state(sd["torch_cpu"])
    if "torch_cuda" in sd and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(sd["torch_cuda"]))
# --8<-- [end:rng]


# torch 2.13 renamed all_gather_into_tensor to all_gather_single and deprecates the old name
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def fixed_order_sum(rows: torch.Tensor) -> torch.Tensor:
    """((r0 + r1) + r2) + ... : floating-point addition is not associative, so the order is part of the result."""
    total = rows[0].clone()
    for r in rows[1:]:
        total += r
    return total


def adam_update(p, g, m, v, step: int, lr: float, b1=0.9, b2=0.999, eps=1e-8):
    """Adam, one correctly rounded operation per line (torch's fused kernels may use FMA in the vector
    body and not in the scalar tail, which would make an element's result depend on its shard offset)."""
    m.mul_(b1).add_(g * (1 - b1))
    v.mul_(b2).add_((g * g) * (1 - b2))
    mhat = m / (1 - b1 ** step)
    vhat = v / (1 - b2 ** step)
    p.sub_(lr * (mhat / (vhat.sqrt() + eps)))


# --8<-- [start:trainer]
class Trainer:
    """Data-parallel training with a ZeRO-1 optimiser over `world` ranks (world divides G)."""

    def __init__(self, rank: int, world: int, seed: int = 0, total_steps: int = 40):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        assert G % world == 0
        self.rank, self.world = rank, world
        self.mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(seed)
        self.model = TinyLM()
        self.params = list(self.model.parameters())
        self.P = sum(p.numel() for p in self.params)
        self.Ppad = -(-self.P // PAD) * PAD
        self.lo, self.hi = rank * self.Ppad // world, (rank + 1) * self.Ppad // world
        self.shards = list(range(rank * G // world, (rank + 1) * G // world))   # my micro-shards
        self.data = corpus(seed=seed)
        self.loader = Loader(len(self.data) - SEQ - 2, G * BATCH, seed)
        self.sched = WarmupCosine(total=total_steps)
        self.gens = {m: torch.Generator().manual_seed(1000 * seed + m) for m in range(G)}  # dropout
        self.pyrngs = {m: random.Random(7 * seed + m) for m in range(G)}                   # jitter
        flat = self.flat_params()
        # ZeRO-1 state: this rank's slice of the fp32 master and of Adam's moments, as Shard(0) DTensors
        local = [flat[self.lo:self.hi].clone(), torch.zeros(self.hi - self.lo), torch.zeros(self.hi - self.lo)]
        self.optim = {k: DTensor.from_local(t, self.mesh, [Shard(0)], run_check=False, shape=(self.Ppad,),
                                            stride=(1,)) for k, t in zip(("master", "exp_avg", "exp_avg_sq"), local)}
        self.step = 0

    def flat_params(self) -> torch.Tensor:
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        return F.pad(flat, (0, self.Ppad - self.P))

    def set_params(self, flat: torch.Tensor) -> None:
        off = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(flat[off:off + p.numel()].view_as(p))
                off += p.numel()

    def _micro_batch(self, m: int, idx: np.ndarray):
        rows = []
        for i in idx[m * BATCH:(m + 1) * BATCH]:
            start = int(i) + self.pyrngs[m].randrange(2)            # data augmentation: jitter by 0 or 1
            rows.append(self.data[start:start + SEQ + 1])
        return torch.stack(rows)

    def micro_grads(self):
        """Forward and backward of this rank's micro-shards on the next global batch."""
        idx = self.loader.next()                                    # the global batch: G * BATCH windows
        grads, losses = [], []
        for m in self.shards:
            win = self._micro_batch(m, idx)
            logits = self.model(win[:, :-1], self.gens[m])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), win[:, 1:].reshape(-1))
            gs = torch.autograd.grad(loss, self.params)
            grads.append(F.pad(torch.cat([g.reshape(-1) for g in gs]), (0, self.Ppad - self.P)))
            losses.append(loss.detach().reshape(1))
        return torch.stack(grads), torch.cat(losses)

    def train_step(self) -> float:
        grads, losses = self.micro_grads()
        every = torch.empty(G, self.Ppad)                            # every micro-shard's gradient
        _all_gather(every, grads)
        all_losses = torch.empty(G)
        _all_gather(all_losses, losses)
        total = fixed_order_sum(every)                               # the same bits on 1, 2 or 4 ranks
        g = total[self.lo:self.hi] / G
        lr = self.sched.lr()
        self.sched.step()
        self.step += 1
        local = {k: t.to_local() for k, t in self.optim.items()}
        adam_update(local["master"], g, local["exp_avg"], local["exp_avg_sq"], self.step, lr)
        full = torch.empty(self.Ppad)
        _all_gather(full, local["master"])                          # ZeRO-1: every rank gets all params
        self.set_params(full)
        return float(fixed_order_sum(all_losses) / G)
    # --8<-- [end:trainer]

    # --8<-- [start:state]
    def state_dict(self) -> dict:
        """What DCP saves. Tensors that every rank holds (the model) are written once; DTensors are written
        shard by shard; everything else (ints, bytes) is pickled. Random streams are saved per micro-shard,
        each by the rank that owns it; the rank's global RNGs are saved under the rank's own key."""
        return {
            "model": {n: p.detach() for n, p in self.model.named_parameters()},   # views: loaded in place
            "optim": {**self.optim, "step": self.step},
            "train": {"sched": self.sched.state_dict(), "loader": self.loader.state_dict()},
            "rng": {f"shard{m}": {"dropout": self.gens[m].get_state(),
                                  "jitter": pickle.dumps(self.pyrngs[m].getstate())} for m in self.shards},
            "rank_rng": {f"rank{self.rank}_of_{self.world}": capture_rank_rng()},
        }

    def load_state_dict(self, sd: dict) -> None:
        """Apply a state dict that dcp.load filled in place (the DTensors and parameters already hold the
        loaded values; the Python objects are new and are copied in here)."""
        self.step = int(sd["optim"]["step"])
        if "train" in sd:
            self.sched.load_state_dict(sd["train"]["sched"])
            self.loader.load_state_dict(sd["train"]["loader"])
        for m in self.shards if "rng" in sd else ():
            self.gens[m].set_state(sd["rng"][f"shard{m}"]["dropout"])
            self.pyrngs[m].setstate(pickle.loads(sd["rng"][f"shard{m}"]["jitter"]))

    def load(self, path: str, parts=("model", "optim", "train", "rng")) -> None:
        import torch.distributed.checkpoint as dcp

        sd = {k: v for k, v in self.state_dict().items() if k in parts}
        dcp.load(sd, checkpoint_id=path)        # resharding: each rank reads the byte ranges it now owns
        self.load_state_dict(sd)
    # --8<-- [end:state]


def checkpoint_files(path: str) -> dict:
    return {f: os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path))}


def checkpoint_layout(path: str) -> dict:
    """Read a DCP checkpoint's metadata file without any process group: for every tensor, its global shape
    and the chunks (offset, length) it was written in; non-tensor entries are listed as 'bytes'."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = FileSystemReader(path).read_metadata()
    out = {}
    for key, m in meta.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            out[key] = {"shape": tuple(m.size), "chunks": sorted((tuple(c.offsets), tuple(c.sizes)) for c in m.chunks)}
        else:
            out[key] = "bytes"
    return out


# --8<-- [start:interval]
def job_mtbf_hours(interruptions: int, days: float) -> float:
    """Mean time between failures of a whole job from an observed count (Llama 3: 419 unexpected in 54 days)."""
    return days * 24 / interruptions


def fitted_optimum(taus, overheads) -> float:
    """Vertex of a parabola fitted to overhead(log tau): the minimum of a noisy, flat-bottomed curve,
    steadier than the argmin of the samples."""
    c = np.polyfit(np.log(taus), overheads, 2)
    return float(np.exp(-c[1] / (2 * c[0])))
# --8<-- [end:interval]


# --8<-- [start:workers]
def worker_save(rank, world, root, steps, save_at, async_at):
    """The uninterrupted run: `steps` steps on `world` ranks, a synchronous DCP save after `save_at` steps
    and an asynchronous one after `async_at` steps whose background write overlaps the next steps."""
    import torch.distributed.checkpoint as dcp

    ckpt_pg = dist.new_group(backend="gloo")   # the background writer's collectives stay off the training group
    tr = Trainer(rank, world, total_steps=steps)
    losses, times, fut = [], {}, None
    for step in range(steps):
        t0 = time.perf_counter()
        losses.append(tr.train_step())
        times.setdefault("step_s", []).append(time.perf_counter() - t0)
        if tr.step == save_at:
            t0 = time.perf_counter()
            dcp.save(tr.state_dict(), checkpoint_id=os.path.join(root, f"step{save_at}"))
            times["sync_save_s"] = time.perf_counter() - t0
        if tr.step == async_at:
            t0 = time.perf_counter()
            fut = dcp.async_save(tr.state_dict(), checkpoint_id=os.path.join(root, f"step{async_at}"),
                                 process_group=ckpt_pg)
            times["async_stall_s"] = time.perf_counter() - t0   # staging copy + planning, not the write
            times["async_overlapped_steps"] = 0
        elif fut is not None and not fut.done():
            times["async_overlapped_steps"] += 1
    t0 = time.perf_counter()
    fut.result()
    times["async_wait_at_end_s"] = time.perf_counter() - t0
    dist.barrier()
    files = checkpoint_files(os.path.join(root, f"step{save_at}")) if rank == 0 else None
    return {"losses": losses, "final": tr.flat_params().numpy(), "times": times, "files": files,
            "shard": (tr.lo, tr.hi), "P": tr.P, "Ppad": tr.Ppad}


def worker_resume(rank, world, root, steps, save_at, async_at):
    """Load the step-`save_at` checkpoint on `world` ranks (a different world size) and continue."""
    tr = Trainer(rank, world, total_steps=steps)
    tr.load(os.path.join(root, f"step{save_at}"))
    assert tr.step == save_at
    losses, at_async = [], None
    while tr.step < steps:
        losses.append(tr.train_step())
        if tr.step == async_at:
            at_async = tr.flat_params().clone()
    out = {"losses": losses, "final": tr.flat_params().numpy(), "shard": (tr.lo, tr.hi)}
    # the asynchronous checkpoint holds exactly the state the run had at that step
    probe = Trainer(rank, world, total_steps=steps)
    probe.load(os.path.join(root, f"step{async_at}"))
    out["async_equal"] = bool(torch.equal(probe.flat_params(), at_async)) and probe.step == async_at
    # an all-reduce sums per-rank partial sums: its association changes with the world size
    probe.load(os.path.join(root, f"step{save_at}"))
    grads, _ = probe.micro_grads()
    every = torch.empty(G, probe.Ppad)
    _all_gather(every, grads)
    reduced = fixed_order_sum(grads)
    dist.all_reduce(reduced)
    out["allreduce_differs"] = int((reduced != fixed_order_sum(every)).sum())
    # what goes wrong when only the model and the optimiser are restored
    partial = Trainer(rank, world, total_steps=steps)
    partial.load(os.path.join(root, f"step{save_at}"), parts=("model", "optim"))
    out["partial_losses"] = [partial.train_step() for _ in range(3)]
    return out
# --8<-- [end:workers]
