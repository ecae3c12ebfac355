"""Workers for tests/test_dist_launch.py: importable by name, as spawned gloo ranks need."""
import os


def echo(rank, world_size):
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return {"rank": rank, "sum": float(t)}


def one_dies(rank, world_size):
    """Rank 1 exits without a word (as a segfault or an OOM kill would); the others wait in a collective."""
    import torch
    import torch.distributed as dist

    if rank == 1:
        os._exit(3)
    t = torch.ones(1)
    dist.all_reduce(t)  # blocks: rank 1 never joins
    return float(t)


def one_raises(rank, world_size):
    import torch
    import torch.distributed as dist

    if rank == 0:
        raise ValueError("planted failure on rank 0")
    t = torch.ones(1)
    dist.all_reduce(t)
    return float(t)
