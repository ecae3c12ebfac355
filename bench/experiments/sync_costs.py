"""What the synchronisation and event APIs cost on an idle GPU, and how fine CUDA event timing is.

Host-side costs are measured per call with time.perf_counter_ns() (its own overhead measured and
reported beside them); GPU-side intervals with CUDA events. Also: the launch + synchronize round
trip of a one-element kernel, `.item()` on a GPU scalar, host timers around an unsynchronised
matmul (they time the launch, not the kernel), and whether the legacy default stream serialises
with a blocking and with a non-blocking stream.
"""
from __future__ import annotations

import statistics
import time

TITLE = "Costs of CUDA event record/query/synchronize, stream and device synchronize, launch round trips; event resolution"
USED_BY = (
    "docs/runtime/streams-events.md",
    "notebooks/runtime/stream-overlap-lab.ipynb",
)

REPS = 2000


def _summary(values_ns, overhead_ns=0):
    us = sorted(max(0.0, (v - overhead_ns) / 1e3) for v in values_ns)
    n = len(us)

    def q(p):
        return us[min(n - 1, int(round(p * (n - 1))))]

    return {"median_us": round(statistics.median(us), 3), "p10_us": round(q(0.10), 3),
            "p90_us": round(q(0.90), 3), "min_us": round(us[0], 3), "max_us": round(us[-1], 3), "n": n}


def _per_call(fn, reps=REPS, warmup=50, between=None):
    for _ in range(warmup):
        fn()
        if between:
            between()
    out = []
    clock = time.perf_counter_ns
    for _ in range(reps):
        t0 = clock()
        fn()
        t1 = clock()
        out.append(t1 - t0)
        if between:
            between()
    return out


def run(torch) -> dict:
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dev = torch.device("cuda")
    torch.cuda.synchronize()
    results = {"reps": REPS}

    # the timer's own cost: two back-to-back perf_counter_ns calls around nothing
    empty = _per_call(lambda: None)
    overhead = statistics.median(empty)
    results["timer_overhead_ns"] = overhead

    stream = torch.cuda.current_stream()
    done = torch.cuda.Event(enable_timing=True)
    done.record()
    torch.cuda.synchronize()
    assert done.query(), "an event recorded on an idle, synchronised stream must be complete"

    host = {}
    host["event_record"] = _summary(_per_call(lambda: done.record()), overhead)
    torch.cuda.synchronize()
    host["event_record_no_timing"] = _summary(
        _per_call(torch.cuda.Event(enable_timing=False).record), overhead)
    torch.cuda.synchronize()
    host["event_query_complete"] = _summary(_per_call(done.query), overhead)
    host["event_synchronize_complete"] = _summary(_per_call(done.synchronize), overhead)
    host["stream_query_idle"] = _summary(_per_call(stream.query), overhead)
    host["stream_synchronize_idle"] = _summary(_per_call(stream.synchronize), overhead)
    host["device_synchronize_idle"] = _summary(_per_call(torch.cuda.synchronize), overhead)

    # launch costs: a one-element in-place add (the smallest kernel PyTorch launches)
    x = torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    counter = {"n": 0}

    def launch():
        x.add_(1.0)
        counter["n"] += 1

    # enqueue only (synchronise outside the timed region every call so the queue never fills)
    host["kernel_launch_enqueue"] = _summary(_per_call(launch, between=torch.cuda.synchronize), overhead)

    def launch_sync():
        x.add_(1.0)
        counter["n"] += 1
        torch.cuda.synchronize()

    host["kernel_launch_plus_device_synchronize"] = _summary(_per_call(launch_sync), overhead)

    def launch_event_sync():
        x.add_(1.0)
        counter["n"] += 1
        done.record()
        done.synchronize()

    host["kernel_launch_plus_event_synchronize"] = _summary(_per_call(launch_event_sync), overhead)

    def launch_item():
        x.add_(1.0)
        counter["n"] += 1
        return x.item()  # a device-to-host copy that waits for the kernel

    host["kernel_launch_plus_item"] = _summary(_per_call(launch_item), overhead)
    torch.cuda.synchronize()
    # check: every launch really ran (float32 counts exactly up to 2**24)
    assert counter["n"] < 2 ** 24 and x.item() == float(counter["n"]), (x.item(), counter["n"])
    results["host_call_costs"] = host

    # ---- event timing resolution: elapsed time between back-to-back events -----------------
    pairs = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        b.record()
        pairs.append((a, b))
    torch.cuda.synchronize()
    empty_ms = [a.elapsed_time(b) for a, b in pairs]
    distinct = sorted(set(round(v * 1e6) for v in empty_ms))  # in ns, as integers
    gaps = [b_ - a_ for a_, b_ in zip(distinct, distinct[1:]) if b_ > a_]
    tiny = []
    for _ in range(REPS // 4):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        x.add_(1.0)
        b.record()
        tiny.append((a, b))
    torch.cuda.synchronize()
    tiny_us = [a.elapsed_time(b) * 1e3 for a, b in tiny]
    results["event_resolution"] = {
        "back_to_back_elapsed_us": _summary([v * 1e6 for v in empty_ms]),
        "distinct_values_ns_first": distinct[:20],
        "smallest_step_between_distinct_values_ns": min(gaps) if gaps else None,
        "one_element_kernel_elapsed_us": _summary([v * 1e3 for v in tiny_us]),
    }

    # ---- host timers lie without synchronisation ---------------------------------------------
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        n = 4096
        gen = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(n, n, device=dev, generator=gen)
        b = torch.randn(n, n, device=dev, generator=gen)
        c = torch.empty(n, n, device=dev)
        for _ in range(3):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        ref = (a[:8].double() @ b.double())
        assert torch.allclose(c[:8].double(), ref, rtol=1e-4, atol=1e-2), "SGEMM result wrong"
        no_sync, with_sync, events = [], [], []
        for _ in range(20):
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            e0.record()
            torch.mm(a, b, out=c)
            e1.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            no_sync.append((t1 - t0) * 1e6)
            with_sync.append((t2 - t0) * 1e6)
            events.append(e0.elapsed_time(e1) * 1e3)
        results["host_timer_vs_events"] = {
            "op": f"fp32 matmul {n}x{n}x{n} (TF32 off)",
            "flops": 2 * n ** 3,
            "host_timer_without_sync_us": round(statistics.median(no_sync), 2),
            "host_timer_with_sync_us": round(statistics.median(with_sync), 2),
            "cuda_events_us": round(statistics.median(events), 2),
        }
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32

    # ---- legacy default stream vs blocking / non-blocking streams ----------------------------
    try:
        results["legacy_default_stream"] = _legacy_stream_test(torch)
    except Exception as exc:  # noqa: BLE001 - an optional part; the error is recorded instead
        torch.cuda.synchronize()
        results["legacy_default_stream"] = {"error": repr(exc)}
    return results


def _legacy_stream_test(torch):
    """A ~2 ms spin kernel on a side stream, then a short one on the legacy default stream.

    With a blocking side stream (cudaStreamDefault flags) the default-stream kernel must wait for the
    side stream's kernel; with a non-blocking one (PyTorch's pool streams) the two may run together."""
    out = {}
    try:
        from cuda.bindings import runtime as cudart
    except Exception as exc:  # noqa: BLE001
        return {"error": f"cuda.bindings unavailable: {exc!r}"}
    cycles_long = 4_000_000   # ~2 ms at ~2 GHz
    cycles_short = 400_000
    legacy = torch.cuda.default_stream()
    assert legacy.cuda_stream == 0, "PyTorch's default stream is expected to be the NULL (legacy) stream"
    stream_default, stream_non_blocking = 0x0, 0x1  # cudaStreamDefault, cudaStreamNonBlocking
    err, blocking = cudart.cudaStreamCreateWithFlags(stream_default)
    assert int(err) == 0, err
    try:
        blocking_ptr = int(blocking)
        side_streams = {
            "blocking_stream": torch.cuda.ExternalStream(blocking_ptr),
            "pytorch_pool_stream": torch.cuda.Stream(),
        }
        for name, side in side_streams.items():
            try:
                err, flags = cudart.cudaStreamGetFlags(side.cuda_stream)
                flags = int(flags) if int(err) == 0 else None
            except Exception:  # noqa: BLE001
                flags = None
            runs = []
            for _ in range(5):
                torch.cuda.synchronize()
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
                with torch.cuda.stream(legacy):
                    ev[0].record()
                side.wait_event(ev[0])
                with torch.cuda.stream(side):
                    ev[1].record()
                    torch.cuda._sleep(cycles_long)
                    ev[2].record()
                with torch.cuda.stream(legacy):
                    ev[3].record()
                    torch.cuda._sleep(cycles_short)
                    ev[4].record()
                torch.cuda.synchronize()
                runs.append({"side_start_ms": ev[0].elapsed_time(ev[1]), "side_end_ms": ev[0].elapsed_time(ev[2]),
                             "default_start_ms": ev[0].elapsed_time(ev[3]), "default_end_ms": ev[0].elapsed_time(ev[4])})
            med = sorted(runs, key=lambda r: r["default_start_ms"])[2]
            out[name] = {"stream_flags": flags, "non_blocking_flag_value": stream_non_blocking,
                         **{k: round(v, 4) for k, v in med.items()},
                         "default_kernel_waited_for_side_kernel": med["default_start_ms"] >= med["side_end_ms"] - 0.002}
    finally:
        cudart.cudaStreamDestroy(blocking)
    return out
