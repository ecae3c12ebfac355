"""Start N gloo ranks on loopback, run one worker function in each, collect results, leave no process behind.

Workers are plain functions ``fn(rank, world_size, *args)`` defined in an importable module (spawned
children re-import them by name). Each rank returns a picklable payload (numbers, lists, numpy arrays).
"""
from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import socket
import time
import traceback


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world_size, port, queue, args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        dist.init_process_group(
            "gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60)
        )
        queue.put((rank, True, fn(rank, world_size, *args)))
    except BaseException:  # report every failure to the parent instead of hanging it
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(fn, world_size: int, *args, timeout: float = 90.0) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned gloo ranks; return the payloads by rank."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(fn, r, world_size, port, queue, args), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    results, errors = {}, []
    try:
        while len(results) + len(errors) < world_size:
            rank, ok, payload = queue.get(timeout=max(0.1, deadline - time.monotonic()))
            if ok:
                results[rank] = payload
            else:
                errors.append(f"rank {rank}:\n{payload}")
                break  # the other ranks may be blocked in a collective: stop them below
    finally:
        for p in procs:
            p.join(timeout=max(0.1, min(10.0, deadline - time.monotonic())))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        queue.close()
    if errors:
        raise RuntimeError("\n".join(errors))
    return [results[r] for r in range(world_size)]
