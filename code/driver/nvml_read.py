"""Read GPU telemetry through NVML (the `pynvml` module of the nvidia-ml-py package).

docs/driver/telemetry.md embeds parts of this file, and bench/experiments/nvml_telemetry.py uses
it to sample an H200. pynvml is imported lazily (`load_nvml()`): the pure parts (unit conversion,
clock-event-reason decoding, per-phase summaries) import nothing beyond the standard library and
are tested on a CPU-only machine by tests/test_driver_telemetry.py, which also drives the
sampler with a fake NVML module. Every function that talks to NVML takes the module as its first
argument, so the same code runs against the real library or the fake.

NVML's units: power in milliwatts, energy in millijoules (since the driver was loaded), clocks in
MHz, temperature in degrees C, utilisation in percent, PCIe throughput in KB/s.
"""
from __future__ import annotations

import statistics
import threading
import time


def load_nvml():
    """Import pynvml (package nvidia-ml-py) and initialise NVML; raises ImportError without it."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


# --8<-- [start:units]
def mw_to_w(milliwatts: float) -> float:
    return milliwatts / 1000.0


def average_power_w(energy0_mj: int, energy1_mj: int, seconds: float) -> float:
    """Mean power between two readings of the energy counter (nvmlDeviceGetTotalEnergyConsumption,
    mJ): unlike one power reading, this averages over exactly the interval you care about."""
    if seconds <= 0:
        raise ValueError("interval must be positive")
    return (energy1_mj - energy0_mj) / 1000.0 / seconds


def pcie_kb_per_s_to_gb_per_s(kb_per_s: float) -> float:
    """nvmlDeviceGetPcieThroughput reports KB/s (1 KB = 1024 bytes); GB/s here is 10^9 bytes/s."""
    return kb_per_s * 1024 / 1e9
# --8<-- [end:units]


# --8<-- [start:reasons]
# The clock event ("throttle") reason bits of nvml.h (nvmlClocksEventReason*; the older names were
# nvmlClocksThrottleReason*). More than one bit can be set at once; none set means the clocks run
# at what they were asked for. BoardLimit and Reliability are the newest two (recent drivers).
CLOCK_EVENT_REASONS = {
    0x001: "GpuIdle",                     # nothing to run: clocks drop on purpose
    0x002: "ApplicationsClocksSetting",   # clocks held at the application clocks (nvidia-smi -ac)
    0x004: "SwPowerCap",                  # the power controller lowers clocks to stay under the limit
    0x008: "HwSlowdown",                  # hardware slowdown (thermal or power brake), halves or more
    0x010: "SyncBoost",                   # held down to match the other GPUs of a sync-boost group
    0x020: "SwThermalSlowdown",           # the driver keeps the GPU/memory under their max temperature
    0x040: "HwThermalSlowdown",           # hardware thermal protection engaged
    0x080: "HwPowerBrakeSlowdown",        # an external power-brake signal (e.g. the PSU) asserted
    0x100: "DisplayClockSetting",         # clocks follow the display clock setting
    0x200: "BoardLimit",                  # a limit of the board (newer nvml.h)
    0x400: "Reliability",                 # held down for reliability (newer nvml.h)
}


def decode_clock_event_reasons(mask: int) -> list[str]:
    """The names of the set bits, lowest first; bits nvml.h does not name come back as hex."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    bit = 1
    while unknown >= bit:
        if unknown & bit:
            names.append(f"0x{bit:x}")
        bit <<= 1
    return names


def is_performance_limited(mask: int) -> bool:
    """True when a reason other than idling or a user clock setting holds the clocks down."""
    benign = 0x001 | 0x002 | 0x100
    return bool(mask & ~benign)
# --8<-- [end:reasons]


VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def union_value(value, value_type: int):
    """Read an nvmlValue_t union through the member that NVML_VALUE_TYPE_* names."""
    return getattr(value, VALUE_MEMBER[value_type])


def _field_value(fv) -> float | None:
    """One nvmlFieldValue_t: pick the union member named by valueType; None if the field failed."""
    if fv.nvmlReturn != 0:
        return None
    return union_value(fv.value, fv.valueType)


def _clock_event_reasons(nvml, handle) -> int:
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(handle))


# --8<-- [start:sample]
FI_DEV_POWER_AVERAGE, FI_DEV_POWER_INSTANT = 185, 186     # nvmlFieldValue ids (nvml.h)


def read_sample(nvml, handle, t0: float) -> dict:
    """One telemetry sample: what `nvidia-smi dmon` shows, read through NVML directly."""
    t = time.perf_counter()
    util = nvml.nvmlDeviceGetUtilizationRates(handle)   # percent of the last sample period
    sample = {
        "t_s": round(t - t0, 4),
        "power_w": mw_to_w(nvml.nvmlDeviceGetPowerUsage(handle)),
        "energy_mj": int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)),
        "sm_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
        "mem_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
        "temp_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        "util_gpu_pct": util.gpu,
        "util_mem_pct": util.memory,
        "reasons": _clock_event_reasons(nvml, handle),
    }
    try:   # instantaneous vs 1-s average power, as separate fields (newer drivers only)
        avg, inst = nvml.nvmlDeviceGetFieldValues(handle, [FI_DEV_POWER_AVERAGE, FI_DEV_POWER_INSTANT])
        for key, fv in (("power_avg_w", avg), ("power_instant_w", inst)):
            value = _field_value(fv)
            sample[key] = None if value is None else mw_to_w(value)
    except nvml.NVMLError:
        sample["power_avg_w"] = sample["power_instant_w"] = None
    sample["query_ms"] = round((time.perf_counter() - t) * 1e3, 3)
    return sample


class Sampler:
    """Calls read_sample every `period_s` on a background thread (NVML is thread-safe, and
    pynvml's ctypes calls release the GIL, so the main thread can keep launching work)."""

    def __init__(self, nvml, handle, period_s: float = 0.02):
        self.nvml, self.handle, self.period_s = nvml, handle, period_s
        self.samples: list[dict] = []
        self.error: BaseException | None = None     # the exception that stopped the thread, if any
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        next_t = time.perf_counter()
        while not self._stop.is_set():
            try:
                self.samples.append(read_sample(self.nvml, self.handle, self.t0))
            except Exception as exc:                # surfaced by the caller through .error
                self.error = exc
                return
            next_t += self.period_s
            self._stop.wait(max(0.0, next_t - time.perf_counter()))

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False
# --8<-- [end:sample]


# --8<-- [start:gpm]
# GPU Performance Monitoring (GPM, Hopper and later): hardware counters read through NVML itself,
# the same source DCGM's profiling fields use on these GPUs. Metric ids from nvmlGpmMetricId_t.
GPM_METRICS = {"graphics_util_pct": 1, "sm_util_pct": 2, "sm_occupancy_pct": 3,
               "any_tensor_util_pct": 5, "dram_bw_util_pct": 10}


def gpm_supported(nvml, handle) -> bool:
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except (nvml.NVMLError, AttributeError):
        return False


def gpm_sample(nvml, handle):
    """Snapshot the GPM counters now; two snapshots bound the interval a metric averages over."""
    sample = nvml.nvmlGpmSampleAlloc()
    nvml.nvmlGpmSampleGet(handle, sample)
    return sample


def gpm_metrics(nvml, first, second, metrics: dict = GPM_METRICS) -> dict:
    """The GPM metrics (percent) between two snapshots; a metric NVML refuses comes back None."""
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metrics)
    request.sample1, request.sample2 = first, second
    for i, metric_id in enumerate(metrics.values()):
        request.metrics[i].metricId = metric_id
    nvml.nvmlGpmMetricsGet(request)
    return {name: (round(request.metrics[i].value, 3) if request.metrics[i].nvmlReturn == 0 else None)
            for i, name in enumerate(metrics)}
# --8<-- [end:gpm]


# --8<-- [start:summary]
NUMERIC = ("power_w", "power_avg_w", "power_instant_w", "sm_mhz", "mem_mhz", "temp_c",
           "util_gpu_pct", "util_mem_pct", "query_ms")


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default method) of an already sorted list."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarise(samples: list[dict], start_s: float, end_s: float, settle_s: float = 0.0) -> dict:
    """Median, p10, p90, min and max of each numeric field over the samples in
    [start_s + settle_s, end_s), the fraction of samples in which each clock event reason was set,
    and the mean power from the energy counter over the same window."""
    window = [s for s in samples if start_s + settle_s <= s["t_s"] < end_s]
    if not window:
        raise ValueError(f"no samples in [{start_s + settle_s:.3f}, {end_s:.3f}) s")
    out: dict = {"n_samples": len(window), "start_s": round(start_s, 3), "end_s": round(end_s, 3)}
    for key in NUMERIC:
        values = sorted(s[key] for s in window if s.get(key) is not None)
        if values:
            out[key] = {"median": round(statistics.median(values), 3),
                        "p10": round(_quantile(values, 0.1), 3), "p90": round(_quantile(values, 0.9), 3),
                        "min": values[0], "max": values[-1]}
    counts: dict[str, int] = {}
    for s in window:
        for name in decode_clock_event_reasons(s["reasons"]):
            counts[name] = counts.get(name, 0) + 1
    out["reason_fraction"] = {name: round(c / len(window), 3) for name, c in sorted(counts.items())}
    if len(window) >= 2 and window[-1]["t_s"] > window[0]["t_s"]:
        out["energy_avg_power_w"] = round(average_power_w(window[0]["energy_mj"], window[-1]["energy_mj"],
                                                          window[-1]["t_s"] - window[0]["t_s"]), 2)
    return out
# --8<-- [end:summary]


def static_info(nvml, handle) -> dict:
    """Facts that do not change while sampling: limits, maximum clocks, ECC and row remapping,
    PCIe link. Each query that this GPU or driver does not support is recorded as None."""

    def ask(fn, *args):
        try:
            value = getattr(nvml, fn)(handle, *args)
        except (nvml.NVMLError, AttributeError):
            return None
        return value.decode() if isinstance(value, bytes) else value

    info = {
        "name": ask("nvmlDeviceGetName"),
        "power_limit_w": mw_to_w(v) if (v := ask("nvmlDeviceGetPowerManagementLimit")) is not None else None,
        "enforced_power_limit_w": mw_to_w(v) if (v := ask("nvmlDeviceGetEnforcedPowerLimit")) is not None else None,
        "power_limit_range_w": [mw_to_w(x) for x in v] if (v := ask("nvmlDeviceGetPowerManagementLimitConstraints")) else None,
        "max_sm_mhz": ask("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM),
        "max_mem_mhz": ask("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_MEM),
        "app_sm_mhz": ask("nvmlDeviceGetApplicationsClock", nvml.NVML_CLOCK_SM),
        "app_mem_mhz": ask("nvmlDeviceGetApplicationsClock", nvml.NVML_CLOCK_MEM),
        "pcie_gen_current": ask("nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_gen_max": ask("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_width_current": ask("nvmlDeviceGetCurrPcieLinkWidth"),
        "pcie_width_max": ask("nvmlDeviceGetMaxPcieLinkWidth"),
        "supported_reasons": decode_clock_event_reasons(v) if (v := ask(
            "nvmlDeviceGetSupportedClocksEventReasons")) is not None else None,
    }
    ecc = {}
    for label, err_type in (("corrected", 0), ("uncorrected", 1)):       # NVML_MEMORY_ERROR_TYPE_*
        for scope, counter in (("volatile", 0), ("aggregate", 1)):       # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
            ecc[f"{label}_{scope}"] = ask("nvmlDeviceGetTotalEccErrors", err_type, counter)
    info["ecc"] = ecc
    rows = ask("nvmlDeviceGetRemappedRows")
    info["remapped_rows"] = (dict(zip(("correctable", "uncorrectable", "pending", "failure"), map(int, rows)))
                             if rows is not None else None)
    return info
