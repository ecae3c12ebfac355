"""Measure CS:APP's CPE ladder (combine.c) and the locality examples (locality.c) on this machine.

    python code/foundations/cpp/cpe-bench.py            # writes data/records/<machine>/cpe.json
    python code/foundations/cpp/cpe-bench.py --quick --out /tmp/cpe.json   # a small, fast run (tests)

Builds combine.c four times with gcc -O1 (long/double x add/mul) and locality.c once, checks every
rung against its reference (the programs do that before timing), runs them, and converts nanoseconds
to core cycles with the clock each program measures next to its work: a chain of dependent integer
adds, whose latency is one cycle on every x86-64 core. Virtual machines and laptops often expose no
cycle counter to perf, and the time-stamp counter ticks at a fixed rate, not the core clock. Every
figure is the fastest of ROUNDS samples: on a shared machine noise only ever slows a sample down.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
CFLAGS = ["-std=c17", "-O1"]
VARIANTS = {  # (type, op) -> the -D flags that select them in combine.c
    ("long", "add"): [],
    ("long", "mul"): ["-DOP_MUL"],
    ("double", "add"): ["-DDATA_DOUBLE"],
    ("double", "mul"): ["-DDATA_DOUBLE", "-DOP_MUL"],
}
# (n, leading dimension): a size whose matrices fit in L3, one that does not, the same with n a power of
# two (every row starts at the same cache set), and that one again with each row padded by one line.
TRANSPOSES = [(1000, 1000), (4000, 4000), (4096, 4096), (4096, 4104)]
BLOCK = 8  # 8 doubles = one 64-byte cache line
MATMUL_N = 600


def cpu_info() -> dict:
    text = Path("/proc/cpuinfo").read_text(encoding="utf-8") if Path("/proc/cpuinfo").exists() else ""
    first = text.split("\n\n", 1)[0]
    fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in first.splitlines()) if v)
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        read = lambda name: (index / name).read_text(encoding="utf-8").strip()  # noqa: E731
        try:
            kind = {"Data": "d", "Instruction": "i", "Unified": ""}[read("type")]
            caches[f"L{read('level')}{kind}"] = {"size": read("size"), "ways": int(read("ways_of_associativity")),
                                                 "line": int(read("coherency_line_size"))}
        except (OSError, KeyError, ValueError):
            continue
    return {"cpu": fields.get("model name", platform.processor() or "unknown"),
            "cpu_family": int(fields["cpu family"]) if "cpu family" in fields else None,
            "cpu_model": int(fields["model"]) if fields.get("model", "").isdigit() else None,
            "virtualized": "hypervisor" in fields.get("flags", "").split(), "caches": caches}


def machine_slug(cpu: str, cores: int) -> str:
    return "cpu-" + re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") + f"-{cores}c"


def provenance(command: str) -> dict:
    info = cpu_info()
    cores = os.cpu_count() or 1
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    os_name = "Linux"
    if Path("/etc/os-release").exists():
        release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        os_name = release.get("PRETTY_NAME", os_name).strip('"')
    mem = 0.0
    if Path("/proc/meminfo").exists():
        mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return {"machine": machine_slug(info["cpu"], cores), **info, "cores": cores, "memory_gib": round(mem, 1),
            "os": os_name, "kernel": platform.release(), "gcc": gcc, "cflags": " ".join(CFLAGS),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "commit": commit or None,
            "command": command}


def build(tmp: Path) -> dict:
    exe = {}
    for (typ, op), defines in VARIANTS.items():
        exe[typ, op] = tmp / f"combine-{typ}-{op}"
        subprocess.run(["gcc", *CFLAGS, *defines, str(HERE / "combine.c"), "-o", str(exe[typ, op])], check=True)
    exe["locality"] = tmp / "locality"
    subprocess.run(["gcc", *CFLAGS, str(HERE / "locality.c"), "-o", str(exe["locality"])], check=True)
    return exe


def run(*cmd) -> list[list[str]]:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({out.returncode}): {out.stderr.strip()}")
    return [line.split() for line in out.stdout.splitlines() if line.strip()]


def transpose_rounds(rounds: int) -> int:  # a transpose of 128 MiB takes a while: fewer samples
    return max(3, rounds // 4)


def matmul_rounds(rounds: int) -> int:
    return max(2, rounds // 10)


# --8<-- [start:cycles]
def split_clock(lines: list[list[str]], clocks: list[float]) -> tuple[list[list[str]], float]:
    """A program's output without its "clock" lines, and the length of one cycle in ns: the mean of the
    clocks it measured before and after its work (each the fastest sample of an add chain)."""
    mine = [float(x[1]) for x in lines if x[0] == "clock"]
    clocks += mine
    return [x for x in lines if x[0] != "clock"], statistics.mean(mine)


def measure(exe: dict, n: int, rounds: int, quick: bool) -> dict:
    clocks: list[float] = []
    bounds, combine = [], []
    for typ, op in VARIANTS:
        lines, cycle = split_clock(run(exe[typ, op], "bounds", rounds), clocks)
        ns = {x[0]: float(x[1]) for x in lines}  # "latency NS", "throughput NS"
        bounds.append({"type": typ, "op": op, "latency_ns": ns["latency"], "latency_cycles": ns["latency"] / cycle,
                       "throughput_ns": ns["throughput"], "throughput_cycles": ns["throughput"] / cycle,
                       "cycle_ns": cycle})
        lines, cycle = split_clock(run(exe[typ, op], "bench", n, rounds), clocks)
        for _, rung, per in lines:  # "rung NAME NS_PER_ELEMENT"; the program checked every rung first
            combine.append({"rung": rung, "type": typ, "op": op, "n": n, "ns_per_element": float(per),
                            "cpe": float(per) / cycle, "cycle_ns": cycle})
    cycle = statistics.median(clocks)  # locality.c prints no clock of its own
    transpose, matmul = [], []
    for size, ld in TRANSPOSES[:1] if quick else TRANSPOSES:
        for _, variant, nn, lld, block, per in run(exe["locality"], "transpose", size, ld, BLOCK, transpose_rounds(rounds)):
            transpose.append({"variant": variant, "n": int(nn), "ld": int(lld), "block": int(block),
                              "ns_per_element": float(per), "cycles_per_element": float(per) / cycle})
    for _, order, nn, per in run(exe["locality"], "matmul", 64 if quick else MATMUL_N, matmul_rounds(rounds)):
        matmul.append({"order": order, "n": int(nn), "ns_per_iteration": float(per),
                       "cycles_per_iteration": float(per) / cycle})
    return {"clock_ghz": 1 / cycle, "cycle_ns": {"median": cycle, "min": min(clocks), "max": max(clocks)},
            "bounds": bounds, "combine": combine, "transpose": transpose, "matmul": matmul}
# --8<-- [end:cycles]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2048, help="elements per vector (2048 doubles = 16 KiB, fits in L1)")
    ap.add_argument("--rounds", type=int, default=40, help="samples per figure; the fastest is kept")
    ap.add_argument("--quick", action="store_true", help="few rounds, small matrices (for tests)")
    ap.add_argument("--out", type=Path, help="default: data/records/<machine>/cpe.json")
    args = ap.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    command = "python code/foundations/cpp/cpe-bench.py" + ("".join(f" {shlex.quote(a)}" for a in (argv or sys.argv[1:])))
    prov = provenance(command)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(build(Path(tmp)), args.n, rounds, args.quick)
    prov["loadavg_1min"] = {"start": load_start, "end": os.getloadavg()[0]}
    record = {"schema": 1, "experiment": "cpe",
              "title": "CS:APP 第 5、6 章：combine 阶梯的 CPE、运算的延迟与吞吐、转置与矩阵乘的访存顺序",
              "provenance": prov,
              "method": {"clock": "每个程序在计时前后各测一次整数加法依赖链（延迟 1 个周期），取其均值作为一个周期的纳秒数",
                         "samples": f"每个数取 {rounds} 个样本中最快的一个", "n": args.n, "block": BLOCK,
                         "samples_locality": f"转置每个数取 {transpose_rounds(rounds)} 个、矩阵乘取 {matmul_rounds(rounds)} 个样本中"
                                             "最快的一个；locality.c 不测时钟，周期数用同一次运行里 combine 各程序所测时钟的中位数换算"},
              "results": results}
    out = args.out or ROOT / "data" / "records" / prov["machine"] / "cpe.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}: clock {results['clock_ghz']:.2f} GHz")
    for b in results["bounds"]:
        print(f"  {b['type']:6s} {b['op']}: latency {b['latency_cycles']:.2f}, issue {b['throughput_cycles']:.2f} cycles")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
