"""Start N gloo ranks on loopback, run one worker function in each, collect results, leave no process behind.

Workers are plain functions ``fn(rank, world_size, *args)`` defined in an importable module: each
spawned child imports the module by name (inside a try, so an import error comes back as that rank's
traceback instead of a child dying before it can report). Each rank returns a picklable payload
(numbers, lists, numpy arrays). A rank that dies (a crash, a kill, an exception) is noticed within
about a second and the launch raises with that rank's traceback or exit code; the other ranks, which
may be blocked in a collective waiting for it, are killed.
"""
from __future__ import annotations

import datetime
import importlib
import multiprocessing as mp
import os
import queue as queue_mod
import socket
import sys
import time
import traceback

POLL_S = 0.2  # how often the parent checks that every rank is still alive


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(target, rank, world_size, port, queue, args, sys_path):
    try:
        sys.path[:0] = [p for p in sys_path if p not in sys.path]
        module, _, name = target.partition(":")
        fn = importlib.import_module(module)
        for part in name.split("."):
            fn = getattr(fn, part)
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group(
            "gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60)
        )
        queue.put((rank, True, fn(rank, world_size, *args)))
    except BaseException:  # report every failure to the parent instead of hanging it
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if "torch" in sys.modules:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _target(fn) -> str:
    module = getattr(fn, "__module__", None)
    if module in (None, "__main__", "__mp_main__") or "<locals>" in fn.__qualname__:
        raise ValueError(f"dist_launch needs a worker defined at the top level of an importable module, "
                         f"got {fn!r} from {module!r}: spawned ranks import it by name "
                         "(move it into a .py file on sys.path)")
    return f"{module}:{fn.__qualname__}"


def launch(fn, world_size: int, *args, timeout: float = 90.0) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned gloo ranks; return the payloads by rank."""
    target = _target(fn)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(target, r, world_size, port, queue, args, list(sys.path)), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    results, errors = {}, []
    try:
        while len(results) < world_size and not errors:
            try:
                rank, ok, payload = queue.get(timeout=POLL_S)
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    errors.append(f"timed out after {timeout:.0f} s with ranks {sorted(set(range(world_size)) - set(results))} "
                                  "still running")
                    break
                # A rank that exited without putting its result (killed, segfault, os._exit) never will:
                # give the queue one more poll for a result still in flight, then report it.
                dead = [r for r, p in enumerate(procs) if r not in results and not p.is_alive()]
                if dead:
                    try:
                        rank, ok, payload = queue.get(timeout=POLL_S)
                    except queue_mod.Empty:
                        errors += [f"rank {r} died with exit code {procs[r].exitcode} before reporting a result"
                                   for r in dead]
                        break
                else:
                    continue
            if ok:
                results[rank] = payload
            else:
                errors.append(f"rank {rank}:\n{payload}")
        if errors:
            # The root cause first: a rank that died silently often makes its peers fail with a
            # connection reset, which is what reaches the queue first.
            time.sleep(POLL_S)
            reported = set(results) | {int(e.split(":")[0].split()[1]) for e in errors if e.startswith("rank ")}
            silent = [f"rank {r} died with exit code {p.exitcode} before reporting a result"
                      for r, p in enumerate(procs) if r not in reported and not p.is_alive()]
            errors[:0] = [e for e in silent if e not in errors]
    finally:
        grace = 10.0 if not errors else 0.5  # on failure the others may be blocked in a collective
        for p in procs:
            p.join(timeout=max(0.1, min(grace, deadline - time.monotonic())))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        queue.close()
        queue.join_thread()
    if errors:
        raise RuntimeError("\n".join(errors))
    return [results[r] for r in range(world_size)]
