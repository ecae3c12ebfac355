"""Where a GPU measurement came from: the GPU, driver, CUDA and library versions, clocks, date and commit.

Shared by `python -m bench`, `bench.collectives`, `bench.scaling`, `bench.experiments` and
`bench.gpu_check`; it imports nothing of the repository, so a lab opened alone can import it too.
"""
from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _smi(query: str) -> list[str] | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]


def _commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def provenance(torch, argv: list[str]) -> dict:
    props = torch.cuda.get_device_properties(0)
    driver = _smi("driver_version")
    clocks = _smi("clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem")
    clock_keys = ("sm_mhz", "mem_mhz", "max_sm_mhz", "max_mem_mhz")
    return {
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "compute_capability": f"{props.major}.{props.minor}",
        "driver": driver[0] if driver else None,
        "cuda_runtime": torch.version.cuda,
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in ("torch", "triton", "numba", "numba-cuda", "numpy")},
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        "clocks_at_start": dict(zip(clock_keys, (float(c) for c in clocks))) if clocks else None,
        "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "commit": _commit(),
        "command": " ".join(["python -m bench", *argv]),
    }


def gpu_slug(name: str) -> str:
    import yaml

    gpus = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]
    for key, spec in gpus.items():
        if spec["device_name"] == name:
            return key
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
