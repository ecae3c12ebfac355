"""NVML telemetry of one GPU across idle, a single-block kernel, tiny kernels, a bf16 matmul and an
H2D copy: power, clocks, temperature, utilisation and clock event reasons every ~20 ms.

The point the pages make with it: `utilization.gpu` is the fraction of time *some* kernel was
running, so one spinning thread (1 block of 1 thread on a 132-SM GPU) reads close to 100 %, just
like a matmul that fills every SM, while power and clocks tell the two apart. It also records the
GPU's PCIe facts from sysfs (code/driver/pci_sysfs.py) and nvidia-smi's text reports (topology,
clocks, power, ECC, performance) for docs/driver/linux-driver-model.md.

The sampler and the summaries are code/driver/nvml_read.py (tested on CPU with a fake NVML).
"""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

TITLE = "NVML telemetry over idle, single-block spin, tiny kernels, bf16 matmul and H2D copy phases"
USED_BY = ("docs/driver/telemetry.md", "docs/driver/linux-driver-model.md", "notebooks/driver/telemetry-lab.ipynb")

ROOT = Path(__file__).resolve().parents[2]
PERIOD_S = 0.02
PHASES_S = (("idle", 2.0), ("single_block_spin", 3.0), ("tiny_kernels", 2.0),
            ("matmul_bf16", 5.0), ("h2d_copy", 2.0), ("idle_after", 2.0))
MATMUL_N = 8192
COPY_BYTES = 256 << 20
SPIN_KERNEL_MS = 10.0


def _load(name: str):
    """Import code/driver/<name>.py by path (the folder `code` would shadow the stdlib module)."""
    spec = importlib.util.spec_from_file_location(f"driver_{name}", ROOT / "code" / "driver" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _smi(*args: str) -> str:
    import subprocess

    try:
        proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(nvidia-smi {' '.join(args)} failed: {exc})"
    return (proc.stdout + proc.stderr).rstrip()


def _section(text: str, heading: str) -> str:
    """The indented block under a `    heading` line of `nvidia-smi -q` (e.g. the PCI block)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == heading and line.startswith("    ") and not line.startswith("     "):
            out = [line]
            for nxt in lines[i + 1:]:
                if nxt.startswith("    ") and not nxt.startswith("     ") and nxt.strip():
                    break
                out.append(nxt)
            return "\n".join(out)
    return ""


def _handle(nvml, torch):
    """The NVML handle of CUDA device 0, matched by PCI bus id (NVML and CUDA may order GPUs
    differently); falls back to NVML index 0 on a single-GPU machine."""
    props = torch.cuda.get_device_properties(0)
    ids = [getattr(props, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if None not in ids:
        bus_id = f"{ids[0]:08x}:{ids[1]:02x}:{ids[2]:02x}.0"
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode()), f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0"
        except nvml.NVMLError:
            pass
    return nvml.nvmlDeviceGetHandleByIndex(0), None


def _pcie_watch(nvml, handle, sampler, stop, out):
    """Every ~100 ms: PCIe TX/RX throughput (each query itself samples for about 20 ms) and the
    current link generation and width (a GPU drops the link speed when idle to save power)."""
    while not stop.is_set():
        t = sampler.now()
        try:
            out.append({"t_s": round(t, 3),
                        "tx_kb_s": nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES),
                        "rx_kb_s": nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES),
                        "gen": nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
                        "width": nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)})
        except nvml.NVMLError as exc:
            out.append({"t_s": round(t, 3), "error": str(exc)})
            return
        stop.wait(0.1)


def _sysfs_facts(pci_sysfs, bdf):
    """The GPU's own sysfs entry and every PCI bridge above it (its path through PCIe switches)."""
    import os
    import re

    if bdf is None:
        return None
    path = pci_sysfs.SYSFS_PCI / bdf
    if not path.exists():
        return {"error": f"{path} absent"}

    def describe(d):
        return {"bdf": d.bdf, "vendor": f"0x{d.vendor:04x}", "device": f"0x{d.device:04x}",
                "class": f"0x{d.class_code:06x}", "class_name": d.class_name, "driver": d.driver,
                "numa_node": d.numa_node, "link": d.link, "msi_vectors": d.msi_vectors,
                "iommu_group": d.iommu_group,
                "bars": [{"index": b.index, "size_bytes": b.size, "kind": b.kind,
                          "prefetchable": b.prefetchable, "flags": f"0x{b.flags:x}"} for b in d.bars]}

    gpu = pci_sysfs.read_device(path)
    real = os.path.realpath(path)
    chain = [c for c in real.split("/") if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", c)]
    upstream = [describe(pci_sysfs.read_device(pci_sysfs.SYSFS_PCI / c)) for c in chain[:-1]]
    devices = pci_sysfs.enumerate_pci()
    by_class: dict[str, int] = {}
    for d in devices:
        by_class[d.class_name] = by_class.get(d.class_name, 0) + 1
    with open(path / "resource") as f:
        resource_text = f.read()
    with open(path / "config", "rb") as f:
        config_head = f.read(64)
    return {"gpu": describe(gpu), "sysfs_path": real, "upstream_bridges": upstream,
            "resource_file": resource_text, "config_header_hex": config_head.hex(),
            "config_header": pci_sysfs.parse_config_header(config_head), "device_count": len(devices),
            "devices_by_class": dict(sorted(by_class.items())),
            "nvidia_devices": pci_sysfs.table([d for d in devices if d.vendor == 0x10DE])}


def _driver_facts() -> dict:
    """The kernel side as a process sees it: NVIDIA's character devices (major, minor), loaded
    modules, the driver's version banner (open or proprietary kernel module) and its interrupts."""
    import glob
    import os
    import stat

    def text(path, keep=lambda line: True):
        try:
            with open(path) as f:
                return [line.rstrip() for line in f if keep(line)]
        except OSError as exc:
            return [f"({path}: {exc.strerror})"]

    devices = {}
    for path in sorted(glob.glob("/dev/nvidia*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isdir(path):
            devices[path] = "directory"
        else:
            devices[path] = {"major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev),
                             "char_device": stat.S_ISCHR(st.st_mode)}
    return {
        "dev_nodes": devices,
        "proc_devices": text("/proc/devices", lambda line: "nvidia" in line),
        "modules": text("/proc/modules", lambda line: line.startswith("nvidia")),
        "driver_version_banner": text("/proc/driver/nvidia/version"),
        "interrupts": [" ".join(line.split()) for line in text("/proc/interrupts", lambda line: "nvidia" in line)][:16],
        "gpu_info": text(next(iter(sorted(glob.glob("/proc/driver/nvidia/gpus/*/information"))), "/nonexistent")),
    }


def run(torch) -> dict:
    import threading

    nvml_read = _load("nvml_read")
    pci_sysfs = _load("pci_sysfs")
    nvml = nvml_read.load_nvml()
    handle, bdf = _handle(nvml, torch)
    props = torch.cuda.get_device_properties(0)
    name = nvml.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else name
    if name.replace("NVIDIA ", "") not in props.name and props.name.replace("NVIDIA ", "") not in name:
        raise RuntimeError(f"NVML handle is {name!r} but CUDA device 0 is {props.name!r}")
    static = nvml_read.static_info(nvml, handle)
    dev = torch.device("cuda", 0)

    # --- set-up and checks, before any sampling ------------------------------------------------
    # The single-block load: torch.cuda._sleep launches one block of one thread that spins on
    # clock64() for the given number of SM cycles. Check it really occupies the GPU for at least
    # cycles / (max SM clock) and calibrate cycles per millisecond.
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    probe = 20_000_000
    calib = []
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(probe)
        e.record()
        e.synchronize()
        calib.append(s.elapsed_time(e))
    floor_ms = probe / (static["max_sm_mhz"] * 1e3) if static["max_sm_mhz"] else 0.0
    if min(calib) < 0.95 * floor_ms:
        raise RuntimeError(f"spin kernel of {probe} cycles took {min(calib):.3f} ms < {floor_ms:.3f} ms")
    spin_cycles = int(probe / min(calib) * SPIN_KERNEL_MS)

    torch.manual_seed(0)
    a = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=torch.bfloat16)
    c = torch.empty(MATMUL_N, MATMUL_N, device=dev, dtype=torch.bfloat16)
    torch.mm(a, b, out=c)
    ref = a[:256].float() @ b.float()
    rel = ((c[:256].float() - ref).abs().max() / ref.abs().max()).item()
    if not rel < 1e-2:             # bf16 output rounding is 2^-8 relative; fp32 accumulation
        raise RuntimeError(f"bf16 matmul differs from the fp32 reference: max rel err {rel:.3g}")
    del ref
    src = torch.randint(0, 256, (COPY_BYTES,), dtype=torch.uint8).pin_memory()
    dst = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    if not (torch.equal(dst[:1 << 20].cpu(), src[:1 << 20]) and torch.equal(dst[-(1 << 20):].cpu(), src[-(1 << 20):])):
        raise RuntimeError("H2D copy does not equal its source")
    tiny = torch.zeros(1, device=dev)
    for _ in range(100):
        tiny.add_(1.0)
    torch.cuda.synchronize()
    tiny.zero_()
    torch.cuda.synchronize()
    time.sleep(1.0)

    # --- the sampled phases ---------------------------------------------------------------------
    phases, loads, pcie, gpm = [], {}, [], {}
    use_gpm = nvml_read.gpm_supported(nvml, handle)

    def gpm_snap():
        try:
            return nvml_read.gpm_sample(nvml, handle)
        except nvml.NVMLError as exc:
            gpm.setdefault("errors", []).append(str(exc))
            return None
    stop = threading.Event()
    t0_epoch_us = int(time.time() * 1e6)
    with nvml_read.Sampler(nvml, handle, PERIOD_S) as sampler:
        watcher = threading.Thread(target=_pcie_watch, args=(nvml, handle, sampler, stop, pcie), daemon=True)
        watcher.start()
        for phase, seconds in PHASES_S:
            start = sampler.now()
            end = start + seconds
            gpm_first = gpm_snap() if use_gpm else None
            if phase.startswith("idle"):
                time.sleep(seconds)
            elif phase == "single_block_spin":
                pairs = []
                while sampler.now() < end:
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    torch.cuda._sleep(spin_cycles)
                    e.record()
                    pairs.append((s, e))
                    if len(pairs) > 3:
                        pairs[-4][1].synchronize()      # keep about three kernels queued
                torch.cuda.synchronize()
                kernel_ms = [s.elapsed_time(e) for s, e in pairs]
                span_ms = pairs[0][0].elapsed_time(pairs[-1][1])
                loads[phase] = {"kernels": len(pairs), "kernel_ms_median": round(sorted(kernel_ms)[len(kernel_ms) // 2], 3),
                                "busy_fraction_of_time": round(sum(kernel_ms) / span_ms, 4),
                                "threads_busy": 1, "blocks_busy": 1,
                                "fraction_of_sms_busy": round(1 / props.multi_processor_count, 5),
                                "fraction_of_thread_slots_busy": round(
                                    1 / (props.multi_processor_count * props.max_threads_per_multi_processor), 7)}
                if loads[phase]["busy_fraction_of_time"] < 0.9:
                    raise RuntimeError(f"spin phase kept the GPU busy only {loads[phase]['busy_fraction_of_time']:.0%} of the time")
            elif phase == "tiny_kernels":
                n = 0
                while sampler.now() < end:
                    for _ in range(200):
                        tiny.add_(1.0)
                    n += 200
                torch.cuda.synchronize()
                if tiny.item() != float(n):
                    raise RuntimeError(f"{n} tiny add kernels produced {tiny.item()}")
                loads[phase] = {"kernels": n, "launches_per_s": round(n / (sampler.now() - start))}
            elif phase == "matmul_bf16":
                s = torch.cuda.Event(enable_timing=True)
                s.record()
                n = 0
                while sampler.now() < end:
                    for _ in range(10):
                        torch.mm(a, b, out=c)
                    n += 10
                    torch.cuda.current_stream().synchronize()
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                e.synchronize()
                ms = s.elapsed_time(e)
                loads[phase] = {"matmuls": n, "n": MATMUL_N, "tflops": round(2 * MATMUL_N ** 3 * n / (ms * 1e-3) / 1e12, 1)}
            elif phase == "h2d_copy":
                s = torch.cuda.Event(enable_timing=True)
                s.record()
                n = 0
                while sampler.now() < end:
                    for _ in range(4):
                        dst.copy_(src, non_blocking=True)
                    n += 4
                    torch.cuda.current_stream().synchronize()
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                e.synchronize()
                ms = s.elapsed_time(e)
                loads[phase] = {"copies": n, "bytes_per_copy": COPY_BYTES,
                                "h2d_gbps": round(COPY_BYTES * n / (ms * 1e-3) / 1e9, 2)}
            if gpm_first is not None:     # SM busy / occupancy / tensor / DRAM over the whole phase
                gpm_second = gpm_snap()
                if gpm_second is not None:
                    try:
                        gpm[phase] = nvml_read.gpm_metrics(nvml, gpm_first, gpm_second)
                    except nvml.NVMLError as exc:
                        gpm[phase] = {"error": str(exc)}
                    nvml.nvmlGpmSampleFree(gpm_second)
                nvml.nvmlGpmSampleFree(gpm_first)
            phases.append({"name": phase, "start_s": round(start, 3), "end_s": round(sampler.now(), 3)})
        stop.set()
        watcher.join(timeout=5)
    if sampler.error is not None:
        raise RuntimeError(f"NVML sampler stopped: {sampler.error!r}")
    samples = sampler.samples
    if len(samples) < 0.5 * sum(s for _, s in PHASES_S) / PERIOD_S:
        raise RuntimeError(f"only {len(samples)} NVML samples in {sum(s for _, s in PHASES_S)} s")
    if not all(s["power_w"] > 0 and s["sm_mhz"] > 0 for s in samples):
        raise RuntimeError("NVML returned a zero power or SM clock")

    summaries = {p["name"]: nvml_read.summarise(samples, p["start_s"], p["end_s"], settle_s=0.5) for p in phases}
    for p in phases:
        summaries[p["name"]]["load"] = loads.get(p["name"], {})
        summaries[p["name"]]["gpm"] = gpm.get(p["name"]) if use_gpm else "GPM not supported here"
        window = [x for x in pcie if "error" not in x and p["start_s"] <= x["t_s"] < p["end_s"]]
        if window:
            summaries[p["name"]]["pcie"] = {
                "tx_gbps_max": round(max(nvml_read.pcie_kb_per_s_to_gb_per_s(x["tx_kb_s"]) for x in window), 3),
                "rx_gbps_max": round(max(nvml_read.pcie_kb_per_s_to_gb_per_s(x["rx_kb_s"]) for x in window), 3),
                "link_gen_seen": sorted({x["gen"] for x in window}),
                "link_width_seen": sorted({x["width"] for x in window})}

    gpm_errors = gpm.get("errors")

    # NVML's own utilisation samples (what utilization.gpu is computed from), on our time axis.
    util_samples = None
    try:
        vtype, raw = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, t0_epoch_us)
        util_samples = [{"t_s": round((x.timeStamp - t0_epoch_us) / 1e6, 4),
                         "util_pct": nvml_read.union_value(x.sampleValue, vtype)} for x in raw]
    except nvml.NVMLError as exc:
        util_samples = {"error": str(exc)}

    keys = ("t_s", "power_w", "power_avg_w", "power_instant_w", "energy_mj", "sm_mhz", "mem_mhz",
            "temp_c", "util_gpu_pct", "util_mem_pct", "reasons", "query_ms")
    try:
        index = str(nvml.nvmlDeviceGetIndex(handle))     # nvidia-smi numbers GPUs as NVML does
    except nvml.NVMLError:
        index = "0"
    try:
        sysfs = _sysfs_facts(pci_sysfs, bdf)
    except Exception as exc:                          # keep the telemetry even if sysfs is odd
        sysfs = {"error": repr(exc)}
    try:
        kernel_driver = _driver_facts()
    except Exception as exc:
        kernel_driver = {"error": repr(exc)}
    full_q = _smi("-q", "-i", index)
    result = {
        "period_s": PERIOD_S,
        "device": {"name": name, "pci_bus_id": bdf, "sm_count": props.multi_processor_count,
                   "max_threads_per_sm": props.max_threads_per_multi_processor, **static},
        "spin_calibration_ms": [round(x, 3) for x in calib],
        "spin_cycles_per_kernel": spin_cycles,
        "phases": phases,
        "summaries": summaries,
        "samples": {k: [s.get(k) for s in samples] for k in keys},
        "reason_names": {f"0x{bit:x}": nm for bit, nm in nvml_read.CLOCK_EVENT_REASONS.items()},
        "nvml_util_samples": util_samples,
        "gpm_errors": gpm_errors,
        "pcie_samples": pcie,
        "sysfs": sysfs,
        "kernel_driver": kernel_driver,
        "smi": {
            "topo_m": _smi("topo", "-m"),
            "q_clock": _smi("-q", "-i", index, "-d", "CLOCK"),
            "q_power": _smi("-q", "-i", index, "-d", "POWER"),
            "q_ecc": _smi("-q", "-i", index, "-d", "ECC"),
            "q_performance": _smi("-q", "-i", index, "-d", "PERFORMANCE"),
            "q_row_remapper": _smi("-q", "-i", index, "-d", "ROW_REMAPPER"),
            "q_pci_section": _section(full_q, "PCI"),
            "query_pcie": _smi("--query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,"
                               "pcie.link.width.current,pcie.link.width.max", "--format=csv"),
        },
    }
    nvml.nvmlShutdown()
    return result
