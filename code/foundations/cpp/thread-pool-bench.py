"""Measure the two thread pools of thread-pool.hpp on this machine and write the record the page quotes.

    python code/foundations/cpp/thread-pool-bench.py          # writes data/records/<machine>/thread-pool.json
    python code/foundations/cpp/thread-pool-bench.py --quick --out /tmp/tp.json   # small sizes (the test)

It compiles thread-pool-bench.cpp with g++ -O2 (no sanitizers), runs it, and stores its JSON output with the
machine it ran on: CPU model and cores from /proc/cpuinfo, kernel, OS, compiler, the load average before and
after (other work on a shared machine slows the pools down), date, commit and command. The C++ program checks
every parallel result against the serial one before it times anything; timings are medians of alternating runs.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCE = Path(__file__).with_suffix(".cpp")
CXXFLAGS = ["-std=c++20", "-O2", "-pthread"]


# --8<-- [start:provenance]
def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text(encoding="utf-8") if cpuinfo.exists() else ""
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1).strip() if m else (platform.processor() or "unknown")


def machine_slug(cpu: str, cores: int) -> str:
    """The folder under data/records/: the same rule as cpe-bench.py, e.g. cpu-amd-epyc-2c."""
    return "cpu-" + re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") + f"-{cores}c"


def provenance(command: str) -> dict:
    cpu, cores = cpu_model(), os.cpu_count() or 1
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    os_name = "Linux"
    if Path("/etc/os-release").exists():
        release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        os_name = release.get("PRETTY_NAME", os_name).strip('"')
    return {"machine": machine_slug(cpu, cores), "cpu": cpu, "cores": cores, "os": os_name,
            "kernel": platform.release(), "compiler": gxx, "cxxflags": " ".join(CXXFLAGS),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": commit or None,
            "command": command}
# --8<-- [end:provenance]


def measure(quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "thread-pool-bench"
        subprocess.run(["g++", *CXXFLAGS, str(SOURCE), "-o", str(exe)], check=True, cwd=SOURCE.parent)
        out = subprocess.run([str(exe), *([] if quick else ["--full"])], capture_output=True, text=True,
                             check=True, timeout=600)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition (for the test)")
    ap.add_argument("--out", type=Path, help="default: data/records/<machine>/thread-pool.json")
    args = ap.parse_args(argv)
    command = " ".join(["python", "code/foundations/cpp/thread-pool-bench.py", *(argv if argv is not None else sys.argv[1:])])
    prov = provenance(command)
    load_start, t0 = os.getloadavg()[0], time.monotonic()
    results = measure(args.quick)
    prov["loadavg_1min"] = {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)}
    record = {"schema": 1, "experiment": "thread-pool",
              "title": "Fork-join sum, flat submissions and quicksort on a single locked queue vs per-worker "
                       "deques with work stealing",
              "used_by": ["docs/foundations/cpp/thread-pool.md"], "seconds": round(time.monotonic() - t0, 1),
              "results": results, "provenance": prov}
    out = args.out or ROOT / "data" / "records" / prov["machine"] / "thread-pool.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
