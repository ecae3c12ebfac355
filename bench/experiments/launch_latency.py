"""Kernel launch cost through the driver API, the runtime API and CUDA Graphs; module load and init.

Parts (all on device 0):
1. correctness: code/driver/launch_driver_api.py loads code/driver/saxpy.ptx with cuModuleLoadData
   and launches `saxpy` with cuLaunchKernel; the result is checked against float64 NumPy. The
   driver API and PyTorch (runtime API) are checked to share the primary context.
2. launch cost of an empty kernel, for N back-to-back launches:
   - `driver_empty`: cuLaunchKernel(empty_kernel) from Python (cuda.bindings), no parameters;
   - `runtime_spin0`: torch.cuda._sleep(0), a pybind call that does `spin_kernel<<<1,1,0,stream>>>(0)`
     in ATen, i.e. the runtime API's cudaLaunchKernel with almost no framework code around it;
   - `runtime_torch_add`: `t.add_(1)` on a one-element tensor, the runtime API behind PyTorch's
     dispatcher and TensorIterator (what a small op costs in eager PyTorch);
   - `graph_driver`: one cuGraphLaunch of a graph captured from N cuLaunchKernel(empty_kernel);
   - `graph_torch_add`: one CUDAGraph.replay() of N captured `t.add_(1)`.
   CPU cost = host time spent issuing the N launches / N. GPU time per kernel = CUDA-event time
   across the N kernels / N, measured with the launches queued behind a spin kernel, so the GPU
   runs them back to back (checked: the first event had not completed when the host finished).
   Single-launch round trip = launch + stream synchronize on an idle GPU.
3. in fresh subprocesses: cuInit, primary-context retain, cuCtxCreate, first cuMemAlloc, and
   module load time of the PTX (JIT, with the compute cache disabled, cold, and warm) against a
   cubin produced once by the driver's JIT linker (cuLinkCreate/cuLinkComplete), under
   CUDA_MODULE_LOADING=EAGER and LAZY.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TITLE = "Kernel launch cost: cuLaunchKernel vs runtime API vs CUDA Graph; PTX JIT vs cubin load; context init"
USED_BY = ["docs/driver/kernel-launch.md", "docs/driver/driver-api.md", "notebooks/driver/driver-api-lab.ipynb"]

ROOT = Path(__file__).resolve().parents[2]
LISTING = ROOT / "code" / "driver" / "launch_driver_api.py"
PTX = ROOT / "code" / "driver" / "saxpy.ptx"
COUNTS = [1, 10, 100, 1000]   # launches per batch (N)
CPU_REPS = 30                 # batches timed per method and N
GPU_REPS = 10
ROUND_TRIPS = 300


def _listing():
    import importlib.util

    spec = importlib.util.spec_from_file_location("launch_driver_api", LISTING)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stats(values):
    xs = sorted(values)
    q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else [xs[0]] * 9
    return {"median": round(statistics.median(xs), 3), "p10": round(q[0], 3), "p90": round(q[-1], 3),
            "min": round(xs[0], 3), "max": round(xs[-1], 3), "n": len(xs)}


def _check_saxpy(got, a, x, y):
    """The PTX uses fma.rn.f32 (one rounding): within 1 float32 ulp of the exact a*x+y."""
    import numpy as np

    ref = np.float64(np.float32(a)) * x.astype(np.float64) + y.astype(np.float64)
    bad = int(np.count_nonzero(np.abs(got.astype(np.float64) - ref) > 2.0**-23 * np.abs(ref) + 1e-38))
    if bad:
        raise AssertionError(f"saxpy through the driver API: {bad} of {x.size} elements wrong")


# ---------------------------------------------------------------------------------------------
# Part 3: a fresh process per configuration (init and module-load times depend on process state)
# ---------------------------------------------------------------------------------------------
def _child() -> None:
    """Run in a fresh interpreter; prints one JSON line. Env decides cache and loading mode."""
    import ctypes

    t0 = time.perf_counter()
    from cuda.bindings import driver as d
    import numpy as np
    t_import = time.perf_counter() - t0
    L = _listing()
    ok = L.ok
    out = {"env": {k: os.environ.get(k) for k in ("CUDA_CACHE_DISABLE", "CUDA_MODULE_LOADING")},
           "import_cuda_bindings_ms": round(t_import * 1e3, 3)}
    t = time.perf_counter()
    ok(d.cuInit(0))
    out["cuInit_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    dev = ok(d.cuDeviceGet(0))
    t = time.perf_counter()
    ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
    ok(d.cuCtxSetCurrent(ctx))
    out["primary_ctx_retain_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    t = time.perf_counter()
    p = ok(d.cuMemAlloc(4096))
    out["first_cuMemAlloc_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    ok(d.cuMemFree(p))

    ptx = PTX.read_bytes() + b"\0"
    ptx_types = L.ptx_entries(PTX.read_text(encoding="ascii"))["saxpy"]
    n = 4096
    x = np.arange(n, dtype=np.float32) * np.float32(0.25)
    y0 = np.ones(n, dtype=np.float32)
    dx, dy = ok(d.cuMemAlloc(4 * n)), ok(d.cuMemAlloc(4 * n))
    ok(d.cuMemcpyHtoD(dx, x.ctypes.data, 4 * n))
    params = L.KernelParams([2.0, int(dx), int(dy), n], ptx_types)

    def load_and_launch(image):
        """Times (ms) of load, get function, first launch+sync, second launch+sync; checks y."""
        ok(d.cuMemcpyHtoD(dy, y0.ctypes.data, 4 * n))
        ok(d.cuCtxSynchronize())
        times = {}
        t = time.perf_counter()
        mod = ok(d.cuModuleLoadData(image))
        times["load_ms"] = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        f = ok(d.cuModuleGetFunction(mod, b"saxpy"))
        times["get_function_ms"] = (time.perf_counter() - t) * 1e3
        for key in ("first_launch_sync_ms", "second_launch_sync_ms"):
            t = time.perf_counter()
            ok(d.cuLaunchKernel(f, n // 256, 1, 1, 256, 1, 1, 0, 0, params.address, 0))
            ok(d.cuCtxSynchronize())
            times[key] = (time.perf_counter() - t) * 1e3
        got = np.empty(n, dtype=np.float32)
        ok(d.cuMemcpyDtoH(got.ctypes.data, dy, 4 * n))
        _check_saxpy(got, 2.0, x, 2.0 * x + y0)   # two launches: y = 2x + (2x + y0)
        ok(d.cuModuleUnload(mod))
        return times

    def repeat(image, reps=5):
        runs = [load_and_launch(image) for _ in range(reps)]
        return {"first": {k: round(v, 3) for k, v in runs[0].items()},
                "later_median": {k: round(statistics.median(r[k] for r in runs[1:]), 3) for k in runs[0]}}

    out["ptx"] = repeat(ptx)
    try:  # a cubin made once by the driver's JIT linker, then loaded like `nvcc -cubin` output
        link = ok(d.cuLinkCreate(0, [], []))
        ok(d.cuLinkAddData(link, d.CUjitInputType.CU_JIT_INPUT_PTX, ptx, len(ptx), b"saxpy.ptx", 0, [], []))
        t = time.perf_counter()
        cubin_ptr, size = ok(d.cuLinkComplete(link))
        out["link_ptx_to_cubin_ms"] = round((time.perf_counter() - t) * 1e3, 3)
        cubin = ctypes.string_at(int(cubin_ptr), int(size))
        ok(d.cuLinkDestroy(link))
        if cubin[:4] != b"\x7fELF":
            raise RuntimeError("cuLinkComplete did not return an ELF cubin")
        out["cubin_bytes"] = len(cubin)
        out["cubin"] = repeat(cubin)
    except Exception as exc:  # noqa: BLE001 - record, do not lose the other numbers
        out["cubin_error"] = repr(exc)
    try:
        t = time.perf_counter()
        lib = ok(d.cuLibraryLoadData(ptx, [], [], 0, [], [], 0))
        ok(d.cuLibraryGetKernel(lib, b"saxpy"))
        out["cuLibraryLoadData_ptx_ms"] = round((time.perf_counter() - t) * 1e3, 3)
        ok(d.cuLibraryUnload(lib))
    except Exception as exc:  # noqa: BLE001
        out["library_error"] = repr(exc)
    ok(d.cuMemFree(dx))
    ok(d.cuMemFree(dy))
    ok(d.cuDevicePrimaryCtxRelease(dev))
    try:
        t = time.perf_counter()
        own = ok(d.cuCtxCreate(None, 0, dev))
        out["cuCtxCreate_ms"] = round((time.perf_counter() - t) * 1e3, 3)
        t = time.perf_counter()
        ok(d.cuCtxDestroy(own))
        out["cuCtxDestroy_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    except Exception as exc:  # noqa: BLE001
        out["ctx_create_error"] = repr(exc)
    print(json.dumps(out))


def _run_child(extra_env: dict) -> dict:
    env = dict(os.environ)
    env.update(extra_env)
    code = ("import sys; sys.path.insert(0, %r); "
            "from bench.experiments.launch_latency import _child; _child()") % str(ROOT)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"child {extra_env} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fresh_process_parts() -> dict:
    cache = tempfile.mkdtemp(prefix="cuda-cache-")
    return {
        "jit_no_cache_eager": _run_child({"CUDA_CACHE_DISABLE": "1", "CUDA_MODULE_LOADING": "EAGER"}),
        "jit_no_cache_lazy": _run_child({"CUDA_CACHE_DISABLE": "1", "CUDA_MODULE_LOADING": "LAZY"}),
        # an empty compute cache: the first load JIT-compiles and writes the cache ...
        "cache_cold_lazy": _run_child({"CUDA_CACHE_DISABLE": "0", "CUDA_CACHE_PATH": cache,
                                       "CUDA_MODULE_LOADING": "LAZY"}),
        # ... and a new process finds the compiled code there
        "cache_warm_lazy": _run_child({"CUDA_CACHE_DISABLE": "0", "CUDA_CACHE_PATH": cache,
                                       "CUDA_MODULE_LOADING": "LAZY"}),
        "note": "times in ms from time.perf_counter() in Python around each driver call; "
                "cuInit includes whatever cuda.bindings does on its first call (loading libcuda)",
    }


# ---------------------------------------------------------------------------------------------
# Parts 1 and 2: in this process, next to PyTorch
# ---------------------------------------------------------------------------------------------
def run(torch) -> dict:
    import numpy as np
    from cuda.bindings import driver as d

    L = _listing()
    ok = L.ok
    torch.cuda.init()
    torch.zeros(1, device="cuda")          # the runtime creates (retains) the primary context
    torch.cuda.synchronize()

    # 1. context sharing: the context PyTorch's runtime made current is the device's primary context
    ok(d.cuInit(0))
    dev = ok(d.cuDeviceGet(torch.cuda.current_device()))
    current = ok(d.cuCtxGetCurrent())
    ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
    shared = int(current) == int(ctx)
    # correctness of the listing (it retains and releases the primary context itself)
    rng = np.random.default_rng(0)
    n = (1 << 20) + 7
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    _check_saxpy(L.saxpy_driver_api(d, 2.5, x, y), 2.5, x, y)
    ok(d.cuCtxSetCurrent(ctx))
    ptx_text = PTX.read_text(encoding="ascii")
    module = ok(d.cuModuleLoadData(PTX.read_bytes() + b"\0"))
    f_empty = ok(d.cuModuleGetFunction(module, b"empty_kernel"))
    f_saxpy = ok(d.cuModuleGetFunction(module, b"saxpy"))

    s = torch.cuda.Stream()
    hs = d.CUstream(s.cuda_stream)
    launch = d.cuLaunchKernel
    sleep = torch.cuda._sleep
    t_small = torch.zeros(1, device="cuda")

    def sync():
        s.synchronize()

    # the launch methods: issue(N) puts N empty kernels into stream s
    def drv(count):
        for _ in range(count):
            r = launch(f_empty, 1, 1, 1, 1, 1, 1, 0, hs, None, 0)
        if int(r[0]) != 0:
            raise RuntimeError(f"cuLaunchKernel: {r[0]}")

    def spin0(count):
        with torch.cuda.stream(s):
            for _ in range(count):
                sleep(0)

    def add(count):
        with torch.cuda.stream(s):
            for _ in range(count):
                t_small.add_(1.0)

    # checks: the driver launch of saxpy on stream s, and the torch op count
    xs = torch.ones(4096, device="cuda")
    ys = torch.zeros(4096, device="cuda")
    saxpy_params = L.KernelParams([1.0, xs.data_ptr(), ys.data_ptr(), 4096], L.ptx_entries(ptx_text)["saxpy"])

    def saxpy_on_s():
        ok(launch(f_saxpy, 16, 1, 1, 256, 1, 1, 0, hs, saxpy_params.address, 0))

    saxpy_on_s()
    sync()
    if not torch.equal(ys, torch.ones_like(ys)):
        raise AssertionError("saxpy on a PyTorch stream did not give y = 1")
    t_small.zero_()
    torch.cuda.synchronize()
    add(1000)
    sync()
    if t_small.item() != 1000.0:
        raise AssertionError("1000 add_ launches did not add 1000")

    # CUDA Graphs, checked: a graph of N saxpy launches adds N, replaying it again adds N more
    graphs = {}
    inst_ms = {}
    for count in COUNTS:
        ok(d.cuStreamBeginCapture(hs, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
        for _ in range(count):
            saxpy_on_s()
        g = ok(d.cuStreamEndCapture(hs))
        gx = ok(d.cuGraphInstantiate(g, 0))
        ys.zero_()
        torch.cuda.synchronize()
        for _ in range(2):
            ok(d.cuGraphLaunch(gx, hs))
        sync()
        if not torch.equal(ys, torch.full_like(ys, 2.0 * count)):
            raise AssertionError(f"graph of {count} saxpy launches replayed twice is wrong")
        ok(d.cuGraphExecDestroy(gx))
        ok(d.cuGraphDestroy(g))
        # the graph that is timed: N empty kernels
        ok(d.cuStreamBeginCapture(hs, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
        drv(count)
        g = ok(d.cuStreamEndCapture(hs))
        t = time.perf_counter()
        gx = ok(d.cuGraphInstantiate(g, 0))
        inst_ms[count] = round((time.perf_counter() - t) * 1e3, 3)
        ok(d.cuGraphUpload(gx, hs))
        sync()
        graphs[count] = (g, gx)

    torch_graphs = {}
    for count in COUNTS:
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg):
            for _ in range(count):
                t_small.add_(1.0)
        t_small.zero_()
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            tg.replay()
        sync()
        if t_small.item() != float(count):
            raise AssertionError(f"torch graph of {count} add_ replayed once is wrong")
        torch_graphs[count] = tg

    def graph_driver(count):
        ok(d.cuGraphLaunch(graphs[count][1], hs))

    def graph_torch(count):
        with torch.cuda.stream(s):
            torch_graphs[count].replay()

    methods = {"driver_empty": drv, "runtime_spin0": spin0, "runtime_torch_add": add,
               "graph_driver": graph_driver, "graph_torch_add": graph_torch}
    per_kernel_launches = {"graph_driver", "graph_torch_add"}  # one host call issues N kernels

    # warm up every path
    for issue in methods.values():
        for count in COUNTS:
            issue(count)
    sync()

    def noop():
        pass

    def python_loop(count):
        for _ in range(count):
            noop()

    results = {"counts": COUNTS, "methods": {}}
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    spin_cycles = 20_000_000
    for name, issue in methods.items():
        entry = {}
        for count in COUNTS:
            cpu, wall = [], []
            for _ in range(CPU_REPS):
                sync()
                t0 = time.perf_counter()
                issue(count)
                t1 = time.perf_counter()
                sync()
                t2 = time.perf_counter()
                cpu.append((t1 - t0) * 1e6 / count)
                wall.append((t2 - t0) * 1e6 / count)
            gpu, prefilled = [], 0
            for _ in range(GPU_REPS):
                for _attempt in range(6):
                    sync()
                    with torch.cuda.stream(s):
                        sleep(spin_cycles)        # keeps the GPU busy while the host queues N launches
                        e0.record(s)
                        issue(count)
                        e1.record(s)
                    still_spinning = not e0.query()
                    sync()
                    if still_spinning:
                        break
                    spin_cycles *= 2
                prefilled += still_spinning
                gpu.append(e0.elapsed_time(e1) * 1e3 / count)
            entry[str(count)] = {"cpu_issue_us_per_kernel": _stats(cpu),
                                 "wall_until_done_us_per_kernel": _stats(wall),
                                 "gpu_us_per_kernel": _stats(gpu),
                                 "gpu_runs_with_queue_prefilled": prefilled, "gpu_runs": GPU_REPS}
        results["methods"][name] = entry
    results["graph_instantiate_ms"] = {str(k): v for k, v in inst_ms.items()}
    results["spin_cycles_used"] = spin_cycles
    py = []
    for _ in range(CPU_REPS):
        t0 = time.perf_counter()
        python_loop(1000)
        py.append((time.perf_counter() - t0) * 1e6 / 1000)
    results["python_call_overhead_us"] = _stats(py)

    # single launch on an idle GPU: host call to kernel finished and seen by the host
    idle, one = [], {}
    for _ in range(ROUND_TRIPS):
        t0 = time.perf_counter()
        ok(d.cuStreamSynchronize(hs))
        idle.append((time.perf_counter() - t0) * 1e6)
    results["sync_idle_stream_us"] = _stats(idle)
    for name in ("driver_empty", "runtime_spin0", "runtime_torch_add", "graph_driver"):
        issue = methods[name]
        rt = []
        for _ in range(ROUND_TRIPS):
            t0 = time.perf_counter()
            issue(1)
            ok(d.cuStreamSynchronize(hs))
            rt.append((time.perf_counter() - t0) * 1e6)
        one[name] = _stats(rt)
    results["single_launch_round_trip_us"] = one
    results["notes"] = {
        "driver_empty": "cuLaunchKernel via cuda.bindings from a Python loop, kernelParams=NULL",
        "runtime_spin0": "torch.cuda._sleep(0): ATen spin_kernel<<<1,1,0,stream>>>(0), i.e. cudaLaunchKernel",
        "runtime_torch_add": "Tensor.add_(1) on a 1-element CUDA tensor: dispatcher + TensorIterator + cudaLaunchKernel",
        "graph_driver": "cuGraphLaunch of a graph of N empty_kernel nodes; per-kernel = per launch / N",
        "graph_torch_add": "CUDAGraph.replay() of N captured add_ kernels; per-kernel = per replay / N",
        "gpu_us_per_kernel": "CUDA events around N kernels queued behind a spin kernel, divided by N",
    }
    results["runtime_and_driver_share_primary_context"] = shared
    results["saxpy_driver_api_checked_n"] = n

    for g, gx in graphs.values():
        ok(d.cuGraphExecDestroy(gx))
        ok(d.cuGraphDestroy(g))
    ok(d.cuModuleUnload(module))
    ok(d.cuDevicePrimaryCtxRelease(dev))
    torch.cuda.synchronize()

    results["fresh_process"] = _fresh_process_parts()
    return results
