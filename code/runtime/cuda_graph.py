"""Launch-overhead arithmetic for CUDA graphs, and vLLM's batch-size buckets.

- `launch_time_model`: time of a chain of n kernels launched one by one (the host issues each
  launch in c microseconds, the GPU runs each in t) and as one graph (one launch of cost g, then
  the kernels back to back with a per-node cost d).
- `fit_line`: least-squares fit y = a + b x, used on the H200 record to get per-kernel costs.
- `vllm_capture_sizes` / `pad_to_capture_size`: the default `cudagraph_capture_sizes` of
  vllm/config/compilation.py and the padding of a batch to the nearest captured size.
"""
from __future__ import annotations

import bisect


# --8<-- [start:model]
def launch_time_model(n: int, c_us: float, t_us: float, g_us: float, d_us: float) -> dict:
    """Eager: the GPU can start kernel i only after the host has issued it, so the chain takes
    about max(n*c, c + n*t). Graph: one launch, then the n nodes run back to back."""
    eager = max(n * c_us, c_us + n * t_us)
    graph = g_us + n * (t_us + d_us)
    return {"eager_us": eager, "graph_us": graph,
            "eager_per_kernel_us": eager / n, "graph_per_kernel_us": graph / n,
            "launch_bound": c_us > t_us}
# --8<-- [end:model]


def fit_line(xs, ys) -> tuple[float, float]:
    """Least squares y = a + b*x; returns (a, b)."""
    n = len(xs)
    if n < 2 or n != len(ys):
        raise ValueError("need two or more (x, y) pairs")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    b = sxy / sxx
    return my - b * mx, b


# --8<-- [start:vllm]
def vllm_capture_sizes(max_size: int) -> list[int]:
    """vLLM's default capture sizes: 1, 2, 4, then every 8 below 256, then every 16 up to max_size."""
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return [s for s in sizes if s <= max_size]


def default_max_capture_size(max_num_seqs: int) -> int:
    return min(max_num_seqs * 2, 512)


def pad_to_capture_size(batch: int, sizes: list[int]) -> int | None:
    """The captured size a batch runs at (the smallest >= batch), or None: too big, run eagerly."""
    i = bisect.bisect_left(sizes, batch)
    return sizes[i] if i < len(sizes) else None
# --8<-- [end:vllm]


def padding_waste(sizes: list[int]) -> float:
    """Mean fraction of padded (wasted) rows over batches 1..max(sizes), each equally likely."""
    top = sizes[-1]
    wasted = sum(pad_to_capture_size(b, sizes) - b for b in range(1, top + 1))
    total = sum(pad_to_capture_size(b, sizes) for b in range(1, top + 1))
    return wasted / total
