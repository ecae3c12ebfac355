"""Copy/compute overlap: a chunked H2D -> matmul -> D2H pipeline on 1 vs 3 streams, pinned vs pageable.

The input (256 MiB of float32, rows of 1024) is cut into chunks; each chunk is copied to the GPU,
multiplied by a fixed 1024 x 1024 matrix (the matmul is repeated so that one compute stage takes
about as long as one chunk's H2D copy), and the product is copied back. Every operation is bracketed
by CUDA events, and its start and end are reported in milliseconds from a start event that every
stream waits on, so the timeline can be drawn. The outputs of every schedule are compared with a
serial run before anything is timed, and the serial run with a float64 CPU reference.
"""
from __future__ import annotations

import statistics
import time

TITLE = "Copy/compute overlap: chunked H2D -> matmul -> D2H on 1 vs 3 streams, pinned vs pageable host memory"
USED_BY = (
    "docs/runtime/copy-overlap.md",
    "docs/runtime/streams-events.md",
    "notebooks/runtime/stream-overlap-lab.ipynb",
)

K = 1024                 # row length (floats) and the matmul's inner/outer dimension
TOTAL_ROWS = 65536       # 65536 x 1024 x 4 B = 256 MiB per direction
MAIN_CHUNKS = 8          # the chunk count whose timelines are recorded
SWEEP_CHUNKS = (1, 2, 4, 8, 16, 32)
NUM_STREAMS = 3
REPS = 5


def _device_attributes():
    """asyncEngineCount and friends, through cuda.bindings (runtime API, then driver API)."""
    out = {}
    try:
        from cuda.bindings import runtime as cudart

        attrs = {
            "async_engine_count": cudart.cudaDeviceAttr.cudaDevAttrAsyncEngineCount,
            "concurrent_kernels": cudart.cudaDeviceAttr.cudaDevAttrConcurrentKernels,
            "can_map_host_memory": cudart.cudaDeviceAttr.cudaDevAttrCanMapHostMemory,
            "unified_addressing": cudart.cudaDeviceAttr.cudaDevAttrUnifiedAddressing,
        }
        for key, attr in attrs.items():
            err, value = cudart.cudaDeviceGetAttribute(attr, 0)
            out[key] = int(value) if int(err) == 0 else None
        out["source"] = "cuda.bindings.runtime.cudaDeviceGetAttribute"
        return out
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        out["runtime_error"] = repr(exc)
    try:
        from cuda.bindings import driver

        driver.cuInit(0)
        err, dev = driver.cuDeviceGet(0)
        err, value = driver.cuDeviceGetAttribute(
            driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, dev)
        out["async_engine_count"] = int(value) if int(err) == 0 else None
        out["source"] = "cuda.bindings.driver.cuDeviceGetAttribute"
    except Exception as exc:  # noqa: BLE001
        out["driver_error"] = repr(exc)
    return out


def _pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def run(torch) -> dict:
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dev = torch.device("cuda")
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # plain FP32 SGEMM: deterministic size of work
    try:
        return _run(torch, dev)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32


def _run(torch, dev) -> dict:
    gen = torch.Generator().manual_seed(0)
    x_page = torch.randn(TOTAL_ROWS, K, generator=gen)          # pageable (ordinary malloc'd pages)
    x_pin = x_page.clone().pin_memory()                          # page-locked copy of the same data
    y_page = torch.zeros(TOTAL_ROWS, K)
    y_pin = torch.zeros(TOTAL_ROWS, K).pin_memory()
    assert x_pin.is_pinned() and y_pin.is_pinned() and not x_page.is_pinned() and not y_page.is_pinned()
    w = (torch.randn(K, K, generator=gen) / K ** 0.5).to(dev)
    x_dev = torch.empty(TOTAL_ROWS, K, device=dev)
    y_dev = torch.empty(TOTAL_ROWS, K, device=dev)
    streams = [torch.cuda.Stream() for _ in range(NUM_STREAMS)]
    torch.cuda.synchronize()
    chunk_bytes_main = TOTAL_ROWS // MAIN_CHUNKS * K * 4

    def ev():
        return torch.cuda.Event(enable_timing=True)

    # ---- whole-buffer copy bandwidths (no compute) --------------------------------------------
    def time_copy(dst, src, reps=REPS):
        times = []
        for _ in range(reps + 1):
            torch.cuda.synchronize()
            a, b = ev(), ev()
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        times = times[1:]  # first rep is a warm-up
        return statistics.median(times)

    copies = {}
    for name, dst, src in (("h2d_pinned", x_dev, x_pin), ("h2d_pageable", x_dev, x_page),
                           ("d2h_pinned", y_pin, x_dev), ("d2h_pageable", y_page, x_dev)):
        ms = time_copy(dst, src)
        copies[name] = {"ms": round(ms, 4), "gbps": round(x_dev.numel() * 4 / (ms * 1e-3) / 1e9, 2)}
    assert torch.equal(y_page, x_page) and torch.equal(y_pin, x_page), "copy round trip changed the data"

    # bidirectional: H2D on one stream and D2H on another at the same time (two copy engines?)
    half = TOTAL_ROWS // 2
    bidir = []
    for _ in range(REPS + 1):
        torch.cuda.synchronize()
        start, e_h, e_d = ev(), ev(), ev()
        start.record()
        for s in streams[:2]:
            s.wait_event(start)
        with torch.cuda.stream(streams[0]):
            x_dev[:half].copy_(x_pin[:half], non_blocking=True)
            e_h.record()
        with torch.cuda.stream(streams[1]):
            y_pin[half:].copy_(x_dev[half:], non_blocking=True)
            e_d.record()
        torch.cuda.synchronize()
        bidir.append(max(start.elapsed_time(e_h), start.elapsed_time(e_d)))
    bidir_ms = statistics.median(bidir[1:])
    copies["bidirectional_pinned"] = {
        "ms": round(bidir_ms, 4), "bytes_each_way": half * K * 4,
        "gbps_total": round(2 * half * K * 4 / (bidir_ms * 1e-3) / 1e9, 2)}

    # ---- calibrate the compute stage: repeat the matmul until it matches one chunk's H2D copy --
    rows_main = TOTAL_ROWS // MAIN_CHUNKS
    xs, ys = x_dev[:rows_main], y_dev[:rows_main]
    x_dev.copy_(x_pin)
    for _ in range(3):
        torch.mm(xs, w, out=ys)
    mm_times = []
    for _ in range(REPS):
        a, b = ev(), ev()
        a.record()
        torch.mm(xs, w, out=ys)
        b.record()
        b.synchronize()
        mm_times.append(a.elapsed_time(b))
    mm_ms = statistics.median(mm_times)
    h2d_chunk_ms = copies["h2d_pinned"]["ms"] / MAIN_CHUNKS
    mm_repeats = max(1, round(h2d_chunk_ms / mm_ms))

    def compute(rows_slice):
        for _ in range(mm_repeats):
            torch.mm(x_dev[rows_slice], w, out=y_dev[rows_slice])

    # ---- the pipeline ------------------------------------------------------------------------
    def pipeline(n_chunks, n_streams, pinned):
        """Issue every chunk depth-first (H2D, compute, D2H) on stream i % n_streams.

        Returns (gpu makespan ms, host issue time ms, timeline list)."""
        xh, yh = (x_pin, y_pin) if pinned else (x_page, y_page)
        rows = TOTAL_ROWS // n_chunks
        y_dev.zero_()
        yh.zero_()
        use = streams[:n_streams]
        torch.cuda.synchronize()
        start, end = ev(), ev()
        marks = []
        start.record()
        for s in use:
            s.wait_event(start)
        t0 = time.perf_counter()
        for i in range(n_chunks):
            sl = slice(i * rows, (i + 1) * rows)
            s = use[i % n_streams]
            with torch.cuda.stream(s):
                for op in ("h2d", "compute", "d2h"):
                    a, b = ev(), ev()
                    a.record()
                    if op == "h2d":
                        x_dev[sl].copy_(xh[sl], non_blocking=True)
                    elif op == "compute":
                        compute(sl)
                    else:
                        yh[sl].copy_(y_dev[sl], non_blocking=True)
                    b.record()
                    marks.append((i, op, i % n_streams, a, b))
        issue_ms = (time.perf_counter() - t0) * 1e3
        for s in use:
            torch.cuda.current_stream().wait_stream(s)
        end.record()
        end.synchronize()
        makespan = start.elapsed_time(end)
        timeline = [{"chunk": i, "op": op, "stream": si,
                     "start_ms": round(start.elapsed_time(a), 4), "end_ms": round(start.elapsed_time(b), 4)}
                    for i, op, si, a, b in marks]
        return makespan, issue_ms, timeline, yh.clone()

    # correctness first: every schedule's output equals the serial pinned run's output
    _, _, _, y_ref = pipeline(MAIN_CHUNKS, 1, True)
    idx = torch.randint(0, TOTAL_ROWS, (64,), generator=gen)
    ref64 = x_page[idx].double() @ w.cpu().double()
    assert torch.allclose(y_ref[idx].double(), ref64, rtol=1e-4, atol=1e-4), "serial run differs from float64 CPU"
    for n_streams in (1, NUM_STREAMS):
        for pinned in (True, False):
            for n_chunks in (MAIN_CHUNKS,) + ((1, 32) if pinned else ()):
                _, _, _, y = pipeline(n_chunks, n_streams, pinned)
                # same shapes, same GEMM: tolerance covers a different cuBLAS kernel choice per stream
                assert torch.allclose(y, y_ref, rtol=1e-5, atol=1e-5), (n_chunks, n_streams, pinned)

    def measured(n_chunks, n_streams, pinned, keep_timeline):
        runs = [pipeline(n_chunks, n_streams, pinned) for _ in range(REPS)]
        order = sorted(range(REPS), key=lambda r: runs[r][0])
        med = runs[order[REPS // 2]]
        out = {"chunks": n_chunks, "streams": n_streams, "host_memory": "pinned" if pinned else "pageable",
               "makespan_ms": round(med[0], 4),
               "makespan_min_ms": round(runs[order[0]][0], 4), "makespan_max_ms": round(runs[order[-1]][0], 4),
               "host_issue_ms": round(med[1], 4)}
        if keep_timeline:
            out["timeline"] = med[2]
        return out

    main = {}
    for n_streams in (1, NUM_STREAMS):
        for pinned in (True, False):
            key = f"{'serial' if n_streams == 1 else 'overlap'}_{'pinned' if pinned else 'pageable'}"
            main[key] = measured(MAIN_CHUNKS, n_streams, pinned, keep_timeline=True)

    sweep = []
    for n_chunks in SWEEP_CHUNKS:
        for n_streams in (1, NUM_STREAMS):
            m = measured(n_chunks, n_streams, True, keep_timeline=True)
            # per-stage totals from the timeline (sum over chunks), so a model can be fed with them
            for op in ("h2d", "compute", "d2h"):
                m[f"{op}_total_ms"] = round(sum(t["end_ms"] - t["start_ms"] for t in m["timeline"] if t["op"] == op), 4)
            if not (n_chunks == MAIN_CHUNKS or n_chunks in (1, 32)):
                m.pop("timeline")
            sweep.append(m)

    return {
        "sizes": {"rows_total": TOTAL_ROWS, "row_floats": K, "bytes_per_direction": TOTAL_ROWS * K * 4,
                  "main_chunks": MAIN_CHUNKS, "main_chunk_bytes": chunk_bytes_main, "streams": NUM_STREAMS,
                  "reps": REPS, "dtype": "float32", "tf32": False},
        "device_attributes": _device_attributes(),
        "copies": copies,
        "compute": {"matmul_ms_per_chunk_once": round(mm_ms, 4), "matmul_repeats": mm_repeats,
                    "flops_per_chunk": 2 * rows_main * K * K * mm_repeats},
        "pipelines": main,
        "sweep_pinned": sweep,
        "checks": "copies round-trip bit-exact; serial output vs float64 CPU rtol=atol=1e-4 on 64 rows; "
                  "every schedule vs serial rtol=atol=1e-5",
    }
