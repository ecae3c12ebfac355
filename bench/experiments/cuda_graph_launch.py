"""Launch overhead: a chain of N tiny kernels launched eagerly vs replayed as one CUDA graph.

For N = 1, 2, 4, ..., 1024 the chain is N in-place `x.add_(1)` on a 256-element float32 tensor
(each a ~microsecond kernel, so launch cost dominates). Per N it records:

- eager: wall time per kernel with a synchronisation at the end, the host time to enqueue the
  chain (before the synchronisation), and the GPU span per kernel from CUDA events;
- graph: capture time (`capture_begin` .. `capture_end`), instantiation time
  (`CUDAGraph(keep_graph=True)` + `instantiate()`, when this torch has them; otherwise
  instantiation is inside capture and `instantiate_ms` is null), the first replay, and the
  steady-state replay (host enqueue, wall with sync, GPU span from events).

Before timing, each graph's replay is checked against eager: from zeros, one replay must give
exactly N in every element and a second replay 2N (float32 holds these integers exactly).

`python -m bench.experiments cuda_graph_launch` runs it on a GPU and writes the record.
"""
from __future__ import annotations

import time

TITLE = "CUDA graph launch overhead: N tiny kernels eager vs one graph replay, N = 1..1024"
USED_BY = ["docs/runtime/cuda-graph.md", "notebooks/runtime/cuda-graph-lab.ipynb"]

KERNEL_COUNTS = [2**k for k in range(11)]  # 1 .. 1024
ELEMS = 256


def _q(xs: list[float]) -> dict:
    xs = sorted(xs)
    n = len(xs)
    return {"median": xs[n // 2], "p10": xs[max(0, n // 10)], "p90": xs[min(n - 1, (9 * n) // 10)],
            "min": xs[0], "max": xs[-1]}


def _new_graph(torch):
    try:
        return torch.cuda.CUDAGraph(keep_graph=True), True
    except TypeError:
        return torch.cuda.CUDAGraph(), False


def run(torch) -> dict:
    if not torch.cuda.is_available():
        raise RuntimeError("cuda_graph_launch needs a CUDA GPU")
    dev = torch.device("cuda")
    x = torch.zeros(ELEMS, device=dev, dtype=torch.float32)
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    # warm up the kernel, the dispatcher and the allocator
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
    if not bool((x == 200).all()):
        raise RuntimeError("warm-up add_ gave a wrong value")

    rows = []
    eager_reps, replay_reps, burst = 20, 50, 20
    for n in KERNEL_COUNTS:
        row = {"kernels": n}
        # ---- eager: check, then time
        x.zero_()
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
        if not bool((x == n).all()):
            raise RuntimeError(f"eager chain of {n} add_ gave a wrong value")
        wall, enq, gpu = [], [], []
        for _ in range(eager_reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            e0.record()
            for _ in range(n):
                x.add_(1)
            e1.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            wall.append((t2 - t0) * 1e6 / n)
            enq.append((t1 - t0) * 1e6 / n)
            gpu.append(e0.elapsed_time(e1) * 1e3 / n)
        row["eager_wall_per_kernel_us"] = _q(wall)
        row["eager_enqueue_per_kernel_us"] = _q(enq)
        row["eager_gpu_span_per_kernel_us"] = _q(gpu)

        # ---- graph: capture (and instantiate separately when possible)
        g, deferred = _new_graph(torch)
        torch.cuda.synchronize()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            t0 = time.perf_counter()
            g.capture_begin()
            for _ in range(n):
                x.add_(1)
            g.capture_end()
            t1 = time.perf_counter()
        main.wait_stream(side)
        torch.cuda.synchronize()
        row["capture_ms"] = (t1 - t0) * 1e3
        row["instantiate_included_in_capture"] = not deferred
        if deferred:
            t0 = time.perf_counter()
            g.instantiate()
            torch.cuda.synchronize()
            row["instantiate_ms"] = (time.perf_counter() - t0) * 1e3
        else:
            row["instantiate_ms"] = None
        # check: replay equals eager (N, then 2N)
        x.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        row["first_replay_us"] = (time.perf_counter() - t0) * 1e6
        if not bool((x == n).all()):
            raise RuntimeError(f"graph of {n} add_: first replay != eager")
        g.replay()
        torch.cuda.synchronize()
        if not bool((x == 2 * n).all()):
            raise RuntimeError(f"graph of {n} add_: second replay != 2N")
        # steady-state replay, one at a time
        wall, enq, gpu = [], [], []
        for _ in range(replay_reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            e0.record()
            g.replay()
            e1.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            wall.append((t2 - t0) * 1e6)
            enq.append((t1 - t0) * 1e6)
            gpu.append(e0.elapsed_time(e1) * 1e3)
        row["replay_wall_us"] = _q(wall)
        row["replay_enqueue_us"] = _q(enq)
        row["replay_gpu_span_us"] = _q(gpu)
        row["replay_wall_per_kernel_us"] = _q([w / n for w in wall])
        row["replay_gpu_span_per_kernel_us"] = _q([w / n for w in gpu])
        # back-to-back replays: throughput when the host never waits
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(burst):
            g.replay()
        torch.cuda.synchronize()
        row["replay_burst_per_kernel_us"] = (time.perf_counter() - t0) * 1e6 / (burst * n)
        x.zero_()
        g.replay()
        torch.cuda.synchronize()
        if not bool((x == n).all()):
            raise RuntimeError(f"graph of {n} add_: replay after timing != eager")
        del g
        rows.append(row)
    return {"kernel_counts": KERNEL_COUNTS, "elements": ELEMS, "dtype": "float32",
            "eager_reps": eager_reps, "replay_reps": replay_reps, "burst_replays": burst,
            "rows": rows, "torch_version": torch.__version__}
