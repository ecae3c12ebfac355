"""code/driver/nvml_read.py (docs/driver/telemetry.md) on a CPU-only machine.

pynvml is not installed here, so the parts that need no GPU are tested directly: unit conversion,
the decoding of the clock-event-reason bitmask against the constants documented in nvml.h
(nvmlClocksEventReason*), and the per-phase summaries against numpy. The sampler and static_info
run against a fake NVML module that mimics pynvml's calls and return types.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
import time
import types

import numpy as np
import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("nvml_read", ROOT / "code" / "driver" / "nvml_read.py")
N = importlib.util.module_from_spec(_spec)
sys.modules["nvml_read"] = N
_spec.loader.exec_module(N)
PAGE = ROOT / "docs" / "driver" / "telemetry.md"
RECORD = ROOT / "data" / "records" / "nvidia-h200" / "nvml_telemetry.json"

# The values nvml.h gives the nvmlClocksEventReason* macros (NVML API reference, "Clock Event Reasons").
NVML_H = {"GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, "HwSlowdown": 0x8,
          "SyncBoost": 0x10, "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40,
          "HwPowerBrakeSlowdown": 0x80, "DisplayClockSetting": 0x100,
          # added in recent releases (nvidia-ml-py 13.x defines them with these values)
          "BoardLimit": 0x200, "Reliability": 0x400}


def test_module_does_not_import_pynvml_at_import_time():
    assert "pynvml" not in sys.modules or sys.modules["pynvml"] is not None
    assert "import pynvml" not in (ROOT / "code" / "driver" / "nvml_read.py").read_text().split("def load_nvml")[0]


def test_reason_constants_match_nvml_h():
    assert {name: bit for bit, name in N.CLOCK_EVENT_REASONS.items()} == NVML_H
    # every bit is a distinct power of two
    assert all(bit & (bit - 1) == 0 for bit in N.CLOCK_EVENT_REASONS)


@pytest.mark.parametrize("mask,names", [
    (0x0, []),
    (0x1, ["GpuIdle"]),
    (0x4, ["SwPowerCap"]),
    (0x4 | 0x20, ["SwPowerCap", "SwThermalSlowdown"]),
    (0x8 | 0x40 | 0x80, ["HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"]),
    (0x1 | 0x800, ["GpuIdle", "0x800"]),            # a bit nvml.h does not name is kept, in hex
    (0x7FF, list(NVML_H)),
])
def test_decode_clock_event_reasons(mask, names):
    assert N.decode_clock_event_reasons(mask) == names


def test_performance_limited_ignores_idle_and_user_settings():
    assert not N.is_performance_limited(0x1 | 0x2 | 0x100)
    assert N.is_performance_limited(0x4) and N.is_performance_limited(0x1 | 0x40)


def test_units():
    assert N.mw_to_w(700_000) == 700.0
    # 350 J over 0.5 s is 700 W
    assert N.average_power_w(1_000_000, 1_350_000, 0.5) == pytest.approx(700.0)
    with pytest.raises(ValueError):
        N.average_power_w(0, 1, 0.0)
    # 1 KB = 1024 bytes in NVML's PCIe counters; 61,035,156.25 KB/s is 62.5 GB/s
    assert N.pcie_kb_per_s_to_gb_per_s(62.5e9 / 1024) == pytest.approx(62.5)


def _samples():
    rng = np.random.default_rng(0)
    out = []
    energy = 0
    for i in range(200):                                # 4 s at 20 ms
        t = i * 0.02
        busy = 1.0 <= t < 3.0
        power = (650 if busy else 90) + rng.normal(0, 5)
        energy += int(power * 20)                        # mJ accumulated over 20 ms
        out.append({"t_s": t, "power_w": power, "power_avg_w": None, "power_instant_w": power,
                    "energy_mj": energy, "sm_mhz": 1980 if busy else 345, "mem_mhz": 3201,
                    "temp_c": 40, "util_gpu_pct": 100 if busy else 0, "util_mem_pct": 50 if busy else 0,
                    "reasons": (0x4 if i % 4 == 0 else 0) if busy else 0x1, "query_ms": 0.5})
    return out


def test_summarise_matches_numpy():
    samples = _samples()
    s = N.summarise(samples, 1.0, 3.0, settle_s=0.2)
    window = [x for x in samples if 1.2 <= x["t_s"] < 3.0]
    power = np.array([x["power_w"] for x in window])
    assert s["n_samples"] == len(window) == 90
    assert s["power_w"]["median"] == pytest.approx(np.median(power), abs=1e-3)
    assert s["power_w"]["p10"] == pytest.approx(np.quantile(power, 0.1), abs=1e-3)
    assert s["power_w"]["p90"] == pytest.approx(np.quantile(power, 0.9), abs=1e-3)
    assert s["util_gpu_pct"]["min"] == 100 and s["sm_mhz"]["median"] == 1980
    assert "power_avg_w" not in s                       # all None: left out, not reported as 0
    assert s["reason_fraction"] == {"SwPowerCap": pytest.approx(sum(x["reasons"] == 4 for x in window) / 90, abs=1e-3)}
    # the energy counter's mean equals the mean of the powers that produced it, to the mJ rounding
    assert s["energy_avg_power_w"] == pytest.approx(np.mean([x["power_w"] for x in window[1:]]), rel=2e-3)
    idle = N.summarise(samples, 0.0, 1.0)
    assert idle["reason_fraction"] == {"GpuIdle": 1.0}
    with pytest.raises(ValueError):
        N.summarise(samples, 10.0, 11.0)


class FakeNVMLError(Exception):
    pass


class _Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Value(ctypes.Union):
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class _FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32), ("timestamp", ctypes.c_int64),
                ("latencyUsec", ctypes.c_int64), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", _Value)]


def fake_nvml(field_values_supported=True, remap=True):
    """A stand-in for pynvml with the calls nvml_read makes and pynvml's return types."""
    m = types.SimpleNamespace(NVMLError=FakeNVMLError, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
                              NVML_TEMPERATURE_GPU=0)
    state = {"energy": 5_000_000}

    def energy(h):
        state["energy"] += 700 * 20                      # 700 W for 20 ms per call
        return state["energy"]

    def field_values(h, ids):
        if not field_values_supported:
            raise FakeNVMLError("Not Supported")
        out = []
        for fid in ids:
            fv = _FieldValue(fieldId=fid, valueType=1, nvmlReturn=0)
            fv.value.uiVal = 690_000 if fid == N.FI_DEV_POWER_AVERAGE else 712_000
            out.append(fv)
        return out

    def not_supported(*a):
        raise FakeNVMLError("Not Supported")

    m.nvmlDeviceGetUtilizationRates = lambda h: _Util(gpu=100, memory=37)
    m.nvmlDeviceGetPowerUsage = lambda h: 700_123
    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetClockInfo = lambda h, kind: {1: 1980, 2: 3201}[kind]
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: {1: 1980, 2: 3201}[kind]
    m.nvmlDeviceGetApplicationsClock = lambda h, kind: {1: 1755, 2: 3201}[kind]
    m.nvmlDeviceGetTemperature = lambda h, sensor: 51
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    m.nvmlDeviceGetFieldValues = field_values
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetPowerManagementLimit = lambda h: 700_000
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    m.nvmlDeviceGetPowerManagementLimitConstraints = lambda h: [200_000, 700_000]
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetSupportedClocksEventReasons = lambda h: 0x7FF
    m.nvmlDeviceGetTotalEccErrors = lambda h, err, counter: 3 if err == 0 else 0
    m.nvmlDeviceGetRemappedRows = (lambda h: (2, 0, 0, 0)) if remap else not_supported
    # GPM: a snapshot is a counter of elapsed "busy SM cycles"; metrics are differences of two
    m.NVML_GPM_METRICS_GET_VERSION = 1
    m.c_nvmlGpmMetricsGet_t = _GpmRequest
    m.nvmlGpmQueryDeviceSupport = lambda h: types.SimpleNamespace(isSupportedDevice=1)
    m.nvmlGpmSampleAlloc = lambda: types.SimpleNamespace(busy=None, t=None)
    m.nvmlGpmSampleFree = lambda snap: None

    def sample_get(h, snap):
        state["gpm_t"] = state.get("gpm_t", 0) + 1000            # 1000 cycles per snapshot
        state["gpm_busy"] = state.get("gpm_busy", 0) + 1000 / 132  # one SM of 132 busy
        snap.t, snap.busy = state["gpm_t"], state["gpm_busy"]
        return snap

    def metrics_get(req):
        assert req.version == 1 and req.numMetrics <= len(req.metrics)
        for metric in req.metrics[:req.numMetrics]:
            if metric.metricId == 2:                                # SM util, percent
                metric.value = 100 * (req.sample2.busy - req.sample1.busy) / (req.sample2.t - req.sample1.t)
            elif metric.metricId == 10:                             # pretend DRAM BW is refused
                metric.nvmlReturn = 3
            else:
                metric.value = 0.0
        return req

    m.nvmlGpmSampleGet = sample_get
    m.nvmlGpmMetricsGet = metrics_get
    return m


class _GpmRequest:
    """Mimics nvmlGpmMetricsGet_t: version, numMetrics, sample1, sample2 and a metrics array."""

    def __init__(self):
        self.version = self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [types.SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(98)]


def test_read_sample_with_fake_nvml():
    s = N.read_sample(fake_nvml(), object(), time.perf_counter())
    assert s["power_w"] == pytest.approx(700.123) and s["util_gpu_pct"] == 100 and s["util_mem_pct"] == 37
    assert s["power_avg_w"] == 690.0 and s["power_instant_w"] == 712.0
    assert s["sm_mhz"] == 1980 and s["reasons"] == 0x4 and s["query_ms"] >= 0
    json.dumps(s)                                        # plain JSON, as the record needs
    s = N.read_sample(fake_nvml(field_values_supported=False), object(), time.perf_counter())
    assert s["power_avg_w"] is None and s["power_instant_w"] is None


def test_field_value_failure_reads_as_none():
    fv = _FieldValue(fieldId=186, valueType=0, nvmlReturn=3)
    assert N._field_value(fv) is None
    fv = _FieldValue(fieldId=186, valueType=0, nvmlReturn=0)
    fv.value.dVal = 1.5
    assert N._field_value(fv) == 1.5


def test_sampler_thread_samples_at_its_period_and_stops():
    with N.Sampler(fake_nvml(), object(), period_s=0.01) as sampler:
        time.sleep(0.3)
    n = len(sampler.samples)
    assert sampler.error is None
    assert 10 <= n <= 40                                  # about 30; a busy 2-core machine may lag
    time.sleep(0.05)
    assert len(sampler.samples) == n                      # the thread has stopped
    ts = [s["t_s"] for s in sampler.samples]
    assert ts == sorted(ts)
    summary = N.summarise(sampler.samples, 0.0, 1.0)
    # the fake adds 14 J per sample: mean power = 14 J per sampling interval
    interval = (ts[-1] - ts[0]) / (n - 1)
    assert summary["energy_avg_power_w"] == pytest.approx(14.0 / interval, rel=1e-2)


def test_sampler_reports_an_nvml_failure():
    nvml = fake_nvml()
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda h: (_ for _ in ()).throw(FakeNVMLError("GPU is lost"))
    with N.Sampler(nvml, object(), period_s=0.01) as sampler:
        time.sleep(0.05)
    assert isinstance(sampler.error, FakeNVMLError) and sampler.samples == []


def test_static_info_with_fake_nvml():
    info = N.static_info(fake_nvml(remap=False), object())
    assert info["name"] == "NVIDIA H200" and info["power_limit_w"] == 700.0
    assert info["power_limit_range_w"] == [200.0, 700.0]
    assert info["ecc"] == {"corrected_volatile": 3, "corrected_aggregate": 3,
                           "uncorrected_volatile": 0, "uncorrected_aggregate": 0}
    assert info["remapped_rows"] is None                  # unsupported query recorded as None
    assert info["supported_reasons"] == list(NVML_H)
    info = N.static_info(fake_nvml(), object())
    assert info["remapped_rows"] == {"correctable": 2, "uncorrectable": 0, "pending": 0, "failure": 0}
    json.dumps(info)


def test_gpm_metrics_between_two_snapshots():
    nvml = fake_nvml()
    assert N.gpm_supported(nvml, object())
    a = N.gpm_sample(nvml, object())
    b = N.gpm_sample(nvml, object())
    got = N.gpm_metrics(nvml, a, b)
    assert set(got) == set(N.GPM_METRICS)
    assert got["sm_util_pct"] == pytest.approx(100 / 132, abs=1e-3)     # one busy SM of 132
    assert got["dram_bw_util_pct"] is None                              # refused metric -> None
    del nvml.nvmlGpmQueryDeviceSupport
    assert not N.gpm_supported(nvml, object())


def test_experiment_section_parser():
    exp = importlib.import_module("bench.experiments.nvml_telemetry")
    text = "GPU 00000000:18:00.0\n    Product Name : X\n    PCI\n        Bus : 0x18\n        GPU Link Info\n" \
           "            PCIe Generation\n                Max : 5\n\n    Fan Speed : N/A\n"
    sec = exp._section(text, "PCI")
    assert sec.startswith("    PCI") and "Max : 5" in sec and "Fan Speed" not in sec
    assert exp._section(text, "Nope") == ""


# --- the committed H200 record (bench/experiments/nvml_telemetry.py) ------------------------------
def _record():
    if not RECORD.exists():
        pytest.skip("no H200 record yet")
    return json.loads(RECORD.read_text())


def test_record_summaries_are_reproduced_by_the_listing():
    rec = _record()["results"]
    cols = rec["samples"]
    samples = [dict(zip(cols, row)) for row in zip(*cols.values())]
    for phase in rec["phases"]:
        again = N.summarise(samples, phase["start_s"], phase["end_s"], settle_s=0.5)
        stored = rec["summaries"][phase["name"]]
        assert again["n_samples"] == stored["n_samples"]
        assert again["power_w"] == stored["power_w"] and again["util_gpu_pct"] == stored["util_gpu_pct"]
        assert again["reason_fraction"] == stored["reason_fraction"]


def test_record_one_block_reads_as_full_utilisation_but_one_sm():
    rec = _record()["results"]
    s = rec["summaries"]
    n_sm = rec["device"]["sm_count"]
    spin, mm, idle = s["single_block_spin"], s["matmul_bf16"], s["idle"]
    assert spin["load"]["busy_fraction_of_time"] > 0.99          # the GPU was never without a kernel
    assert spin["util_gpu_pct"]["median"] >= 95                   # ...so NVML reads ~100 %
    assert idle["util_gpu_pct"]["max"] == 0
    # GPM sees the space dimension: one SM of 132 busy, one warp of 64 x 132 warp slots resident.
    # Tolerance: the phase's GPM window includes launch gaps and the first/last partial kernel (<5 %).
    assert spin["gpm"]["sm_util_pct"] == pytest.approx(100 / n_sm, rel=0.05)
    assert spin["gpm"]["sm_occupancy_pct"] == pytest.approx(100 / (64 * n_sm), rel=0.1)
    assert mm["gpm"]["sm_util_pct"] > 80 and mm["gpm"]["any_tensor_util_pct"] > 50
    assert mm["util_gpu_pct"]["median"] >= 95                     # same NVML reading as the one-thread kernel


def test_record_power_clocks_and_limits_obey_physics():
    import yaml

    rec = _record()["results"]
    s, dev = rec["summaries"], rec["device"]
    limit = dev["enforced_power_limit_w"]
    mm, spin = s["matmul_bf16"], s["single_block_spin"]
    assert mm["power_w"]["median"] <= limit * 1.01                # the 1-s average is held at the cap
    assert mm["power_w"]["median"] > 3 * spin["power_w"]["median"]
    assert mm["sm_mhz"]["median"] <= dev["max_sm_mhz"]
    # clocks below the maximum under the matmul go with the SwPowerCap reason
    if mm["sm_mhz"]["median"] < dev["max_sm_mhz"]:
        assert mm["reason_fraction"].get("SwPowerCap", 0) > 0.5
    for phase in ("single_block_spin", "matmul_bf16"):          # energy counter mean ~ power readings
        assert s[phase]["energy_avg_power_w"] == pytest.approx(s[phase]["power_w"]["median"], rel=0.05)
    spec = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text())["gpus"]["nvidia-h200"]
    assert mm["load"]["tflops"] < spec["bf16_tensor_dense_tflops"]
    gen, width = dev["pcie_gen_max"], dev["pcie_width_max"]
    payload = {4: 16.0, 5: 32.0}[gen] * width * 128 / 130 / 8      # GB/s per direction after 128b/130b
    assert s["h2d_copy"]["load"]["h2d_gbps"] < payload
    for name in rec["reason_names"].values():
        assert name in N.CLOCK_EVENT_REASONS.values()


def test_record_tensor_activity_times_clock_scaled_peak_is_the_achieved_rate():
    """GPM's tensor utilisation is relative to the peak sustained rate at the running clock, so
    util x (datasheet peak x clock / max clock) should match the timed TFLOPS. Tolerance 10 %: the
    GPM window includes the ramp at the phase start, and the clock is a median over the phase."""
    import yaml

    rec = _record()["results"]
    mm = rec["summaries"]["matmul_bf16"]
    spec = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text())["gpus"]["nvidia-h200"]
    peak_now = spec["bf16_tensor_dense_tflops"] * mm["sm_mhz"]["median"] / rec["device"]["max_sm_mhz"]
    predicted = mm["gpm"]["any_tensor_util_pct"] / 100 * peak_now
    assert predicted == pytest.approx(mm["load"]["tflops"], rel=0.10)


def test_record_power_usage_is_the_one_second_average_on_hopper():
    """NVML's reference: nvmlDeviceGetPowerUsage returns the 1-s average on Ampere (except GA100) and newer,
    instantaneous power on GA100 and older. The H200 (Hopper, compute capability 9.0) record stores three
    columns read in the same sample: power_w from nvmlDeviceGetPowerUsage (read_sample), power_avg_w and
    power_instant_w from nvmlDeviceGetFieldValues (NVML_FI_DEV_POWER_AVERAGE = 185, ..._INSTANT = 186).
    power_w must be the average: equal to it bit for bit, or, where the reading was refreshed between the two
    queries of one sample, equal to the average of the neighbouring sample; never equal to the instant value."""
    import inspect

    src = inspect.getsource(N.read_sample)
    assert '"power_w": mw_to_w(nvml.nvmlDeviceGetPowerUsage(handle))' in src
    assert "[FI_DEV_POWER_AVERAGE, FI_DEV_POWER_INSTANT]" in src
    assert (N.FI_DEV_POWER_AVERAGE, N.FI_DEV_POWER_INSTANT) == (185, 186)       # nvml.h
    record = _record()
    assert record["provenance"]["compute_capability"] == "9.0"                   # Hopper: the 1-s average applies
    cols = record["results"]["samples"]
    p, avg, inst = (np.array(cols[k], dtype=float) for k in ("power_w", "power_avg_w", "power_instant_w"))
    same = p == avg
    assert same.mean() > 0.9 and not (p == inst).any()
    for k in np.flatnonzero(~same):
        assert p[k] in avg[max(k - 1, 0):k + 2]
    # the page quotes the share of samples where the two agree bit for bit
    page = PAGE.read_text(encoding="utf-8")
    assert f"`power_w` 在 {round(100 * same.mean())}% 的样本里与 1 秒平均逐位相同" in page
    assert "Ampere 起 `nvmlDeviceGetPowerUsage`" not in page                    # the erratum: GA100 is excluded
