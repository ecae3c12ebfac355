"""Failures at scale, demonstrated on CPU processes: how often a large job is interrupted and what each
interruption costs, how a hang is located, how torchrun-style elastic restarts resume from a sharded
checkpoint on fewer ranks, and how torchft-style in-job recovery lets a failed replica group drop out and
rejoin by copying a peer's state.

* MTBF and lost work: a job fails when its first GPU fails, so its MTBF is the per-GPU MTBF over N; the
  work lost per failure and the best checkpoint interval follow in closed form and are checked against a
  Monte Carlo simulation that draws failures independently of the formulas.
* Hangs: every collective is recorded per rank (sequence number, op, shapes, entered/completed) in a file
  that survives the rank; comparing the ranks' last records names the rank that fell behind or took
  another branch. PyTorch's flight recorder (TORCH_FR_BUFFER_SIZE, also for gloo) does the same in memory.
* Elastic restart: a supervisor that mirrors torchrun's agent (monitor every 0.1 s, stop every worker on
  a failure, rendezvous the remaining nodes, restart with new ranks, max_restarts) around the DCP trainer
  of checkpointing.py.
* In-job recovery: an in-process simulation of torchft's Lighthouse quorum, per-step commit vote and
  live recovery from a peer.

Used by docs/framework/fault-tolerance.md and notebooks/framework/fault-tolerance-lab.ipynb; tested by
tests/test_framework_fault_tolerance.py.
"""
from __future__ import annotations

import datetime
import io
import json
import math
import multiprocessing as mp
import os
import queue as queue_mod
import re
import signal
import sys
import time

import numpy as np

# Llama 3 paper (arXiv:2407.21783), §3.3.4, Table 5: root causes of the 419 unexpected interruptions in a
# 54-day snapshot of 405B pre-training on 16,384 H100 GPUs (component, category, count, percent as printed).
# Every printed percent is count / 419 except Faulty GPU (148 / 419 = 35.3 %, printed 30.1 %): the printed
# column adds up to 94.9 %, and the text's "GPU issues ... 58.7 %" is the sum of the printed GPU rows.
LLAMA3_TABLE5 = [
    ("Faulty GPU", "GPU", 148, 30.1), ("GPU HBM3 Memory", "GPU", 72, 17.2),
    ("Software Bug", "Dependency", 54, 12.9), ("Network Switch/Cable", "Network", 35, 8.4),
    ("Host Maintenance", "Unplanned Maintenance", 32, 7.6), ("GPU SRAM Memory", "GPU", 19, 4.5),
    ("GPU System Processor", "GPU", 17, 4.1), ("NIC", "Host", 7, 1.7),
    ("NCCL Watchdog Timeouts", "Unknown", 7, 1.7), ("Silent Data Corruption", "GPU", 6, 1.4),
    ("GPU Thermal Interface + Sensor", "GPU", 6, 1.4), ("SSD", "Host", 3, 0.7),
    ("Power Supply", "Host", 3, 0.7), ("Server Chassis", "Host", 2, 0.5),
    ("IO Expansion Board", "Host", 2, 0.5), ("Dependency", "Dependency", 2, 0.5),
    ("CPU", "Host", 2, 0.5), ("System Memory", "Host", 2, 0.5),
]
LLAMA3_GPUS, LLAMA3_DAYS, LLAMA3_INTERRUPTIONS, LLAMA3_PLANNED = 16384, 54, 466, 47


# --8<-- [start:mtbf]
def job_failure_times(n_gpus: int, mtbf_gpu: float, runs: int, rng: np.random.Generator) -> np.ndarray:
    """Time to the job's first failure: every GPU draws its own exponential lifetime, the job stops at the
    smallest. (The minimum of N independent exponentials is exponential with mean mtbf_gpu / N.)"""
    return rng.exponential(mtbf_gpu, size=(runs, n_gpus)).min(axis=1)


def expected_lost_work(segment: float, mtbf: float) -> float:
    """Mean progress lost by a failure that hits a segment of `segment` seconds (compute + save) since the
    last checkpoint: E[t | t < s] for t ~ Exp(M), = M - s / (e^{s/M} - 1) ~ s/2 - s^2/(12 M)."""
    return mtbf - segment / math.expm1(segment / mtbf)


def simulate_overhead(tau: float, delta: float, mtbf: float, work: float, runs: int,
                      rng: np.random.Generator, restart: float = 0.0):
    """Monte Carlo of `work` seconds of compute cut into segments of tau, each followed by a save of delta.
    Per segment the number of failed attempts is geometric (success probability e^{-(tau+delta)/M}), so a
    run's failures are negative-binomial; each failure loses a truncated-exponential time in [0, tau+delta)
    plus the restart. Returns (overhead of every run, lost seconds per failure of every failure)."""
    n_seg = max(1, round(work / tau))
    seg = work / n_seg + delta
    p_ok = math.exp(-seg / mtbf)
    failures = rng.negative_binomial(n_seg, p_ok, size=runs)
    u = rng.random(int(failures.sum()))
    lost = -mtbf * np.log1p(-u * -math.expm1(-seg / mtbf))          # inverse CDF of Exp(M) truncated to [0, seg)
    per_run = np.bincount(np.repeat(np.arange(runs), failures), weights=lost, minlength=runs)
    wall = n_seg * seg + per_run + restart * failures
    return wall / work - 1, lost
# --8<-- [end:mtbf]


# --8<-- [start:collective_log]
class CollectiveLog:
    """A per-rank record of collectives: a sequence number, the op, the shapes, and whether the call
    returned. It is written through to a small file on every change, so it survives a rank that hangs or
    is killed (the flight recorder keeps a ring buffer in memory and dumps it on a timeout or a signal)."""

    def __init__(self, path: str, rank: int):
        self.path, self.rank, self.seq, self.last = path, rank, 0, None

    def _write(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"rank": self.rank, **self.last}, f)
        os.replace(tmp, self.path)                       # atomic: a reader never sees half a record

    def call(self, op: str, fn, *tensors, **kwargs):
        self.seq += 1
        self.last = {"seq": self.seq, "op": op, "shapes": [list(t.shape) for t in tensors if hasattr(t, "shape")],
                     "state": "entered"}
        self._write()
        out = fn(*tensors, **kwargs)
        self.last["state"] = "completed"
        self._write()
        return out


def diagnose(records: dict) -> dict:
    """records: rank -> that rank's last record. Ranks whose last sequence number is below the maximum never
    entered the collective the others wait in (stuck or dead before it); ranks at the maximum whose op or
    shapes differ from the majority took another branch (desync). Returns {rank: reason}."""
    top = max(r["seq"] for r in records.values())
    at_top = {k: (r["op"], tuple(map(tuple, r["shapes"]))) for k, r in records.items() if r["seq"] == top}
    sigs = list(at_top.values())
    majority = max(set(sigs), key=sigs.count)
    out = {k: f"behind: last entered #{r['seq']} {r['op']}, the others are in #{top}"
           for k, r in records.items() if r["seq"] < top}
    out.update({k: f"desync: #{top} is {sig[0]}{list(sig[1])} here, {majority[0]}{list(majority[1])} elsewhere"
                for k, sig in at_top.items() if sig != majority})
    return out
# --8<-- [end:collective_log]


def flight_recorder_last(pg_name: str | None = None) -> dict | None:
    """The newest flight-recorder entry of this process (optionally of one process group), from PyTorch's
    own dump (the same pickle TORCH_NCCL_DUMP_ON_TIMEOUT writes); None when the recorder is off."""
    import pickle

    import torch._C._distributed_c10d as c10d

    entries = pickle.loads(c10d._dump_fr_trace()).get("entries", [])
    if pg_name is not None:
        entries = [e for e in entries if e["process_group"][0] == pg_name]
    if not entries:
        return None
    e = entries[-1]
    return {"seq": e["collective_seq_id"], "op": e["profiling_name"], "shapes": e["input_sizes"],
            "state": e["state"], "timeout_ms": e["timeout_ms"]}


# --8<-- [start:hang_worker]
def worker_hang(rank, world, log_dir, culprit, timeout_s):
    """Two hangs on one job. Each scenario runs in its own gloo group with a short timeout (the default
    group keeps the launcher's). 'desync': at step 3 the culprit takes another branch (it saw non-finite
    gradients, skips the all-reduce and asks for rank 0's copy with a broadcast of the same size).
    'stuck': the culprit stalls before step 3's all-reduce (a data-loader or I/O stall) past the timeout."""
    import torch
    import torch.distributed as dist

    out, limit = {}, datetime.timedelta(seconds=timeout_s)
    groups = {s: dist.new_group(backend="gloo", timeout=limit) for s in ("desync", "stuck")}  # made up front:
    for scenario, pg in groups.items():                       # ranks leave a timed-out scenario at different times
        dist.barrier()                                          # line up on the default group (60 s timeout)
        pg_name = dist.distributed_c10d._get_process_group_name(pg)
        log = CollectiveLog(os.path.join(log_dir, f"{scenario}-rank{rank}.json"), rank)
        grads, loss = torch.full((1000,), float(rank)), torch.ones(1)
        t0, error = time.monotonic(), None
        try:
            for step in range(1, 5):
                if rank == culprit and step == 3 and scenario == "stuck":
                    time.sleep(timeout_s + 1.0)        # never enters #5 while the others wait there
                    break
                if rank == culprit and step == 3 and scenario == "desync":   # "my gradients are bad:
                    log.call("broadcast(grads)", dist.broadcast, grads, 0, group=pg)  # take rank 0's"
                else:
                    log.call("all_reduce(grads)", dist.all_reduce, grads, group=pg)
                log.call("all_reduce(loss)", dist.all_reduce, loss, group=pg)
        except RuntimeError as e:                      # gloo: "Timed out waiting ...ms for recv operation"
            error = "timed out" if "Timed out" in str(e) else str(e).splitlines()[0][-120:]
        out[scenario] = {"error": error, "waited_s": time.monotonic() - t0, "record": log.last,
                         "flight_recorder": flight_recorder_last(pg_name)}
    return out
# --8<-- [end:hang_worker]


# ---------------------------------------------------------------------------------------------------------
# Elastic restart
def _worker_context():
    """The start method for the workers. Every worker imports torch (about 2 s of CPU each); with a forkserver
    that has imported torch and DCP once, a worker is a cheap fork of it. Spawn where there is no forkserver."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "torch.distributed.checkpoint"])
    return ctx


def _stop_forkserver(ctx) -> None:
    """Stop the forkserver (it would otherwise live as long as this interpreter and hold its children's
    CPU time out of this process's accounting)."""
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver
        stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
        if stop is not None:
            stop()


# --8<-- [start:supervisor]
def elastic_launch(fn, nodes, *args, min_nodes=1, max_restarts=3, monitor_interval=0.1, timeout=120.0):
    """Run fn(rank, world, attempt, node, *args) on one process per node, the way torchrun's agent does:

    1. rendezvous: the nodes present form the group (at least min_nodes), ranks 0..W-1 are assigned afresh
       (sorted by node name) and a new store port is used for this round;
    2. monitor every `monitor_interval` s: a worker that exited non-zero or reported an exception fails the
       whole group (FAILED), even though the others are still running (they are blocked in a collective);
    3. stop every worker (SIGTERM, then SIGKILL after a grace period), spend one of max_restarts, drop the
       node whose worker died (here: its host is gone), and go back to 1 with the nodes that remain.

    Returns (payloads by rank of the successful attempt, event log)."""
    sys.path.insert(0, os.path.dirname(__file__))
    import dist_launch

    target = dist_launch._target(fn)
    ctx = _worker_context()                               # forkserver: torch is imported once, not per worker
    alive, remaining, attempt, events = sorted(nodes), max_restarts, 0, []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if len(alive) < min_nodes:
                raise RuntimeError(f"rendezvous failed: {len(alive)} nodes < min_nodes={min_nodes}")
            ranks = {node: r for r, node in enumerate(alive)}
            world, port, q = len(alive), dist_launch.free_port(), ctx.Queue()
            procs = {node: ctx.Process(target=dist_launch._entry, daemon=True,
                                       args=(target, r, world, port, q, (attempt, node, *args), list(sys.path)))
                     for node, r in ranks.items()}
            for p in procs.values():
                p.start()
            events.append({"event": "rendezvous", "attempt": attempt, "ranks": dict(ranks)})
            results, failed, died = {}, {}, set()

            def poll():
                while True:                                   # drain what the workers reported
                    try:
                        rank, ok, payload = q.get_nowait()
                    except queue_mod.Empty:
                        break
                    if ok:
                        results[rank] = payload
                    else:                                     # often a peer's death seen as a broken connection
                        last = payload.strip().splitlines()[-1]
                        failed[alive[rank]] = re.sub(r"\[[^\]]*/[^\]]*\]\s*", "", last)[:80]   # drop source paths
                for node, p in procs.items():                # died without reporting: killed, segfault, lost host
                    if p.exitcode not in (None, 0) and node not in failed and ranks[node] not in results:
                        failed[node] = f"died, exit code {p.exitcode}"
                        died.add(node)

            while not failed and len(results) < world:
                time.sleep(monitor_interval)
                poll()
                if time.monotonic() > deadline:
                    failed["supervisor"] = "timed out"
            noticed = time.time()
            if failed:                                        # the root cause may surface a moment after its echoes
                time.sleep(monitor_interval)
                poll()
            for p in procs.values():                          # stop the group: survivors are stuck in a collective
                if p.is_alive():
                    p.terminate()
            for p in procs.values():
                p.join(timeout=2.0)
                if p.is_alive():
                    p.kill()
                    p.join(timeout=2.0)
            q.close()
            q.join_thread()
            if not failed:
                events.append({"event": "succeeded", "attempt": attempt})
                return [results[r] for r in range(world)], events
            events.append({"event": "failed", "attempt": attempt, "failed": dict(failed), "lost": sorted(died),
                           "noticed_at": noticed, "remaining_restarts": remaining})
            if remaining == 0 or "supervisor" in failed:
                raise RuntimeError(f"job failed after {attempt + 1} attempts: {failed}")
            remaining -= 1
            alive = [n for n in alive if n not in died]       # a node whose worker vanished is gone; the rest re-join
            attempt += 1
    finally:
        _stop_forkserver(ctx)                             # no process left behind
# --8<-- [end:supervisor]


# --8<-- [start:elastic_worker]
G_ELASTIC, PAD_ELASTIC = 6, 768   # micro-shards divisible by world sizes 3, 2 and 1; padding divisible by 3


def _trainer_class():
    """checkpointing.Trainer with G=6 micro-shards (so 3 and 2 ranks both divide it) and a hook that can
    kill this process in the middle of a step: after its backward pass, before the gradient all-gather.
    Sets the module constants that Trainer reads; call it only in a worker process (or use
    reference_in_process, which restores them)."""
    import checkpointing as ck

    ck.G, ck.PAD = G_ELASTIC, PAD_ELASTIC

    class KillableTrainer(ck.Trainer):
        kill_at, kill_file = None, None

        def micro_grads(self):
            out = super().micro_grads()
            if self.kill_at == self.step + 1:
                with open(self.kill_file, "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)   # no exception, no cleanup: like a lost host
            return out
    return KillableTrainer


def latest_checkpoint(root: str):
    """The newest complete DCP checkpoint under root (DCP writes .metadata last, after every shard)."""
    done = [int(d[4:]) for d in os.listdir(root) if d.startswith("step")
            and os.path.exists(os.path.join(root, d, ".metadata"))]
    return max(done) if done else None


def elastic_worker(rank, world, attempt, node, root, steps, every, kill):
    """Train to `steps`, saving a DCP checkpoint every `every` steps; on start, resume from the newest
    checkpoint whatever world size wrote it. kill = (node, step): that node dies during that step of
    attempt 0."""
    import torch.distributed.checkpoint as dcp

    tr = _trainer_class()(rank, world, total_steps=steps)
    start = latest_checkpoint(root)
    if start is not None:
        tr.load(os.path.join(root, f"step{start}"))
    if attempt == 0 and node == kill[0]:
        tr.kill_at, tr.kill_file = kill[1], os.path.join(root, "killed_at")
    begin = tr.step
    while tr.step < steps:
        tr.train_step()
        if tr.step % every == 0:
            dcp.save(tr.state_dict(), checkpoint_id=os.path.join(root, f"step{tr.step}"))
    return {"resumed_from": start, "steps_run": tr.step - begin, "final": tr.flat_params().numpy()}


def reference_in_process(steps: int):
    """The uninterrupted run on one rank, in this process (a one-rank gloo group on loopback); the
    micro-shard design makes it bit-identical to a run on 3 or 2 ranks."""
    import checkpointing as ck
    import torch.distributed as dist

    sys.path.insert(0, os.path.dirname(__file__))
    import dist_launch

    saved = ck.G, ck.PAD
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{dist_launch.free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))
    try:
        tr = _trainer_class()(0, 1, total_steps=steps)
        while tr.step < steps:
            tr.train_step()
        return tr.flat_params().numpy()
    finally:
        dist.destroy_process_group()
        ck.G, ck.PAD = saved
# --8<-- [end:elastic_worker]


# ---------------------------------------------------------------------------------------------------------
# In-job recovery (torchft), simulated in one process
# --8<-- [start:torchft]
class Lighthouse:
    """torchft's Lighthouse forms a quorum from the replica groups that are alive (heartbeats) and asked to
    join; each group's Manager then computes, as in compute_quorum_results (src/manager.rs): participants
    sorted by replica id, max_step, and for every replica behind max_step a source among the up-to-date
    ones (round robin)."""

    def __init__(self, min_replicas: int):
        self.min_replicas, self.quorum_id, self.last = min_replicas, 0, None

    def quorum(self, members: dict) -> dict:
        """members: replica id -> its step. Returns the quorum with recovery assignments."""
        if len(members) < self.min_replicas:
            raise RuntimeError(f"only {len(members)} replicas, min_replicas={self.min_replicas}")
        ids = sorted(members)
        if ids != self.last:                       # membership changed: a new quorum (new process group)
            self.quorum_id, self.last = self.quorum_id + 1, ids
        max_step = max(members.values())
        up_to_date = [i for i in ids if members[i] == max_step]
        heal = {r: up_to_date[k % len(up_to_date)]
                for k, r in enumerate(i for i in ids if members[i] != max_step)}
        return {"id": self.quorum_id, "participants": ids, "max_step": max_step, "heal": heal}


class Replica:
    """One replica group (here a single process's model and optimiser) with its Manager state."""

    def __init__(self, rid: str, seed: int):
        import torch
        from torch import nn

        torch.manual_seed(seed)
        self.rid = rid
        self.model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.step, self.batches_committed = 0, 0

    def state_dict(self) -> dict:             # what the Manager sends: user state + its own step counters
        return {"user": {"model": self.model.state_dict(), "optim": self.opt.state_dict()},
                "torchft": {"step": self.step, "batches_committed": self.batches_committed}}

    def load_state_dict(self, sd: dict) -> None:
        self.model.load_state_dict(sd["user"]["model"])
        self.opt.load_state_dict(sd["user"]["optim"])
        self.step, self.batches_committed = sd["torchft"]["step"], sd["torchft"]["batches_committed"]

    def grads(self, step: int, replica_rank: int):
        """Forward/backward on this replica's shard of the step's batch (data keyed by step and rank)."""
        import torch

        g = torch.Generator().manual_seed(1000 * step + replica_rank)
        x = torch.randn(32, 8, generator=g)
        y = x.sum(1, keepdim=True).sin()
        self.opt.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        return [p.grad.clone() for p in self.model.parameters()], float(loss.detach())


def send_checkpoint(src: Replica) -> bytes:
    """Live recovery: the source serialises its state (torchft's HTTPTransport streams the same state dict
    from the healthy replica's memory; no checkpoint file is read)."""
    import torch

    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    return buf.getvalue()


def ft_train(steps: int, n_replicas: int = 3, min_replicas: int = 2, fail=None, rejoin=None):
    """Per-step fault tolerance: every step forms a quorum, heals replicas that are behind from a peer,
    averages gradients over the participants (sum / num_participants, as Manager.allreduce does), and
    steps the optimiser only where should_commit says so. should_commit is a vote among the ranks of one
    replica group; a replica that dies before the cross-group all-reduce makes that all-reduce fail in every
    group, so here every group votes no for that step. fail = (replica id, step): that replica dies after
    its backward pass of that step; rejoin = step at which it comes back, freshly initialised. Steps are
    numbered from 0 (step k is the (k+1)-th). Returns the replicas and a per-step log."""
    import torch

    replicas = {f"r{i}": Replica(f"r{i}", seed=0) for i in range(n_replicas)}   # same init everywhere
    lh, log, failed_once = Lighthouse(min_replicas), [], False
    for _ in range(10 * steps):
        if min(r.step for r in replicas.values()) >= steps:
            break
        step_no = max(r.step for r in replicas.values())
        if rejoin is not None and fail is not None and step_no == rejoin and fail[0] not in replicas:
            replicas[fail[0]] = Replica(fail[0], seed=123)            # a new process, different init
        q = lh.quorum({rid: r.step for rid, r in replicas.items()})
        healed = {}
        for dst, src in q["heal"].items():                             # live recovery from a peer
            before = [p.detach().clone() for p in replicas[dst].model.parameters()]
            replicas[dst].load_state_dict(torch.load(io.BytesIO(send_checkpoint(replicas[src])),
                                                     weights_only=False))
            healed[dst] = {"from": src, "changed": any(not torch.equal(a, b) for a, b in
                                                       zip(before, replicas[dst].model.parameters()))}
        grads, ok = {}, True
        for rank, rid in enumerate(q["participants"]):
            grads[rid], _ = replicas[rid].grads(q["max_step"], rank)
            if fail is not None and (rid, q["max_step"]) == fail and not failed_once:
                ok, failed_once = False, True                          # dies before the all-reduce
        n = len(q["participants"])
        if ok:                                                         # the all-reduce succeeded everywhere
            avg = [sum(gs[i] for gs in (grads[r] for r in q["participants"])) / n
                   for i in range(len(grads[q["participants"][0]]))]
            for rid in q["participants"]:
                for p, g in zip(replicas[rid].model.parameters(), avg):
                    p.grad = g.clone()
                replicas[rid].opt.step()
                replicas[rid].step += 1
                replicas[rid].batches_committed += n
        else:
            del replicas[fail[0]]                  # its heartbeat stops; the others' all-reduce failed: no commit
        log.append({"quorum": q["id"], "participants": q["participants"], "step": q["max_step"],
                    "committed": ok, "healed": healed})
    return replicas, log
# --8<-- [end:torchft]
