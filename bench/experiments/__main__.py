"""`python -m bench.experiments [NAME ...] [--out DIR] [--list]`: run the GPU experiments.

Each experiment runs in a fresh Python process (a CUDA error or a hang in one cannot spoil the
next), bounded by --timeout seconds, and its record is written to DIR/<gpu>/<name>.json
(default DIR: data/records). Needs an NVIDIA GPU; without one it says so and exits with 2.
"""
from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.experiments import RECORDS, names  # noqa: E402

SCHEMA_VERSION = 1


def run_one(name: str, out_dir: Path, argv: list[str]) -> Path:
    """Run experiment `name` in this process and write its record; returns the record's path."""
    import torch

    from bench.provenance import gpu_slug, provenance

    module = importlib.import_module(f"bench.experiments.{name}")
    start = time.perf_counter()
    results = module.run(torch)
    seconds = time.perf_counter() - start
    prov = provenance(torch, argv)
    prov["command"] = "python -m bench.experiments " + name
    record = {"schema": SCHEMA_VERSION, "experiment": name, "title": module.TITLE,
              "used_by": list(module.USED_BY), "seconds": round(seconds, 1),
              "results": results, "provenance": prov}
    path = out_dir / gpu_slug(prov["gpu"]) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.experiments", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"experiments to run (default: all of {', '.join(names())})")
    parser.add_argument("--out", default=str(RECORDS), help="records folder (default data/records)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed to each experiment")
    parser.add_argument("--list", action="store_true", help="list the experiments and exit")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        for name in names():
            print(name, "-", importlib.import_module(f"bench.experiments.{name}").TITLE)
        return 0
    if args.one:
        print(run_one(args.one, Path(args.out), argv))
        return 0
    unknown = sorted(set(args.names) - set(names()))
    if unknown:
        parser.error(f"unknown experiments: {', '.join(unknown)} (known: {', '.join(names())})")
    try:
        import torch
    except ImportError:
        print("bench.experiments: PyTorch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench.experiments: no CUDA GPU here; the committed records are in data/records/", file=sys.stderr)
        return 2
    failed = []
    for name in args.names or names():
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            proc = subprocess.run([sys.executable, "-m", "bench.experiments", "--one", name, "--out", args.out],
                                  cwd=ROOT, timeout=args.timeout)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            print(f"{name}: over {args.timeout:.0f} s, stopped", file=sys.stderr)
            ok = False
        print(f"== {name}: {'ok' if ok else 'FAILED'} in {time.perf_counter() - t0:.1f} s", flush=True)
        if not ok:
            failed.append(name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
