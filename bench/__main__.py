"""GPU benchmarks of the labs: `python -m bench [LAB ...]` (`make bench`).

The kernels are not copied here: for each lab (notebooks/<section>/<slug>.ipynb) this runs the
lab's setup cell and its cells tagged `kernel` and `bench`, then times every rung that the lab's
`bench_cases(n)` returns, at every size of its `BENCH_SIZES`, with `triton.testing.do_bench`
(CUDA events, warm-up, median of many runs). Each rung is first checked against the lab's
reference on a poisoned output. It also measures a device-to-device copy, the practical
bandwidth ceiling. Records go to data/bench/<gpu>/<lab>.json with full provenance.

Needs an NVIDIA GPU; on a machine without one it says so and exits with status 2.
"""
from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import envcheck  # noqa: E402
from bench.provenance import gpu_slug, provenance  # noqa: E402,F401  (re-exported for older callers)
from tools import labs  # noqa: E402

SCHEMA_VERSION = 1
WARMUP_MS, REP_MS = 25, 200


def _timing() -> dict:
    return {"method": "triton.testing.do_bench (CUDA events, L2 flushed before each run)",
            "warmup_ms": WARMUP_MS, "rep_ms": REP_MS, "statistic": "median"}


def bench_copy(torch, do_bench) -> dict:
    """Device-to-device copy: bytes read + bytes written over time, the practical HBM ceiling."""
    results = []
    for mib in (64, 256, 1024, 4096):
        n = mib * 2**20 // 4
        src = torch.rand(n, device="cuda")
        dst = torch.full_like(src, float("nan"))
        dst.copy_(src)
        torch.cuda.synchronize()
        assert torch.equal(dst, src), "copy check failed"
        ms = do_bench(lambda dst=dst, src=src: dst.copy_(src), warmup=WARMUP_MS, rep=REP_MS, return_mode="median")
        moved = 2 * n * 4
        results.append({"rung": "torch-copy", "n": n, "dtype": "float32", "bytes": moved, "flops": 0,
                        "time_ms": ms, "gbps": moved / ms / 1e6, "tflops": 0.0})
        del src, dst
        torch.cuda.empty_cache()
    return {"schema": SCHEMA_VERSION, "lab": "copy", "title": "设备内拷贝带宽（实际带宽上限）",
            "timing": _timing(), "results": results}


def lab_namespace(nb_path: Path) -> dict:
    """Run the lab's setup, kernel and bench cells as one module and return its globals."""
    import runpy

    module = labs.as_module(nb_path, {labs.SETUP_TAG, "kernel", "bench"})
    ns = runpy.run_path(str(module), run_name="__lab__")
    if "bench_cases" not in ns or "BENCH_SIZES" not in ns:
        raise SystemExit(f"{labs.rel(nb_path)}: no cell tagged 'bench' defines BENCH_SIZES and bench_cases(n)")
    return ns


def resolve_reference(reference: dict, results: list[dict], metric: str) -> dict[str, str]:
    """BENCH_REFERENCE maps a rung to one rung, or to a list of candidates (e.g. every SDPA backend):
    a list resolves to the fastest candidate measured at the largest size, so the reference is always
    the best library on this GPU."""
    largest = max((r["n"] for r in results), default=0)
    score = {r["rung"]: r[metric] for r in results if r["n"] == largest}
    resolved = {}
    for rung, ref in reference.items():
        candidates = [ref] if isinstance(ref, str) else [c for c in ref if c in score]
        if candidates:
            resolved[rung] = max(candidates, key=lambda c: score.get(c, -1.0))
    return resolved


def run_rungs(case: dict, n: int, timer, sync, unavailable: dict[str, str], log=print) -> tuple[list[dict], list[dict]]:
    """Check and time each rung of one case. A rung whose framework cannot run here, or that fails,
    is listed under not_measured with the reason; the other rungs go on."""
    results, skipped = [], []
    for rung, fn in case["runs"].items():
        fw = envcheck.framework_of(rung)
        if fw in unavailable:
            skipped.append({"rung": rung, "n": n, "reason": f"{fw} unavailable: {unavailable[fw]}"})
            log(f"  {rung:28s} n={n:>11,d}  not measured ({fw} cannot run here)")
            continue
        try:
            case["reset"]()
            fn()
            sync()
            check = case["check"]
            check(rung) if inspect.signature(check).parameters else check()  # raises if this rung is wrong
            ms = timer(fn)
        except Exception as exc:  # noqa: BLE001 - one rung must not stop the others
            skipped.append({"rung": rung, "n": n, "reason": f"{type(exc).__name__}: {exc}"[:500]})
            log(f"  {rung:28s} n={n:>11,d}  FAILED: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        results.append({"rung": rung, "n": n, "dtype": case.get("dtype", "float32"),
                        "bytes": case["bytes"], "flops": case["flops"], "time_ms": ms,
                        "gbps": case["bytes"] / ms / 1e6, "tflops": case["flops"] / ms / 1e9})
        log(f"  {rung:28s} n={n:>11,d}  {ms * 1e3:10.1f} us  {results[-1]['gbps']:8.1f} GB/s"
            f"  {results[-1]['tflops']:7.1f} TFLOP/s")
    return results, skipped


def bench_lab(torch, do_bench, nb_path: Path, unavailable: dict[str, str] | None = None) -> dict:
    ns = lab_namespace(nb_path)
    results, not_measured = [], []
    timer = lambda fn: do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")  # noqa: E731
    for n in ns["BENCH_SIZES"]:
        case = ns["bench_cases"](n)
        got, skipped = run_rungs(case, n, timer, torch.cuda.synchronize, unavailable or {},
                                 log=lambda m: print(m, flush=True))
        results += got
        not_measured += skipped
        del case
        torch.cuda.empty_cache()
    slug = labs.rel(nb_path).removeprefix("notebooks/").removesuffix(".ipynb")
    metric = ns.get("BENCH_METRIC", "gbps")
    record = {"schema": SCHEMA_VERSION, "lab": slug, "title": ns.get("BENCH_TITLE", slug),
              "metric": metric, "rung_labels": ns.get("RUNGS", {}),
              "timing": _timing(), "results": results}
    if ns.get("BENCH_REFERENCE"):
        record["reference"] = resolve_reference(ns["BENCH_REFERENCE"], results, metric)
        if any(not isinstance(v, str) for v in ns["BENCH_REFERENCE"].values()):
            record["reference_candidates"] = ns["BENCH_REFERENCE"]
    if not_measured:
        record["not_measured"] = not_measured
    return record


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", help="labs to run, e.g. operator/vector-add (default: every lab with a bench cell)")
    parser.add_argument("--out", default=str(ROOT / "data" / "bench"), help="folder for the JSON records")
    args = parser.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("python -m bench needs PyTorch with CUDA; install the pinned requirements first (make venv).")
        return 2
    if not torch.cuda.is_available():
        print("python -m bench needs an NVIDIA GPU with a CUDA driver, and none is visible on this machine.\n"
              "Nothing was measured. The records already taken on GPUs are in data/bench/; the labs plot them.")
        hint = envcheck.cpu_build_hint(torch, "bench")
        if hint:
            print(hint)
        return 2
    env = envcheck.check_frameworks(printer=lambda m: print(m, flush=True))
    if not env["torch-cuda"]["ok"]:
        print("PyTorch cannot run a CUDA kernel here, so nothing can be measured.")
        return 2
    unavailable = {fw: r["error"] for fw, r in env.items() if not r["ok"]}
    if not env["numba-cuda"]["ok"]:
        envcheck.stub_numba()  # the labs still load; their Numba rungs are recorded as not measured
    from triton.testing import do_bench

    chosen = [labs.NOTEBOOKS / f"{name}.ipynb" for name in args.labs] or [
        p for p in labs.iter_notebooks() if any("bench" in c.get("metadata", {}).get("tags", []) for c in labs.load(p)["cells"])
    ]
    prov = provenance(torch, args.labs)  # the output folder is not part of the provenance
    out_dir = Path(args.out) / gpu_slug(prov["gpu"])
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"GPU: {prov['gpu']} ({prov['sm_count']} SMs), driver {prov['driver']}, CUDA {prov['cuda_runtime']}, "
          f"torch {prov['packages']['torch']}, triton {prov['packages']['triton']}")

    prov["environment"] = {fw: {"ok": r["ok"], "packages": r["packages"], **({} if r["ok"] else {"error": r["error"]})}
                           for fw, r in env.items()}
    records = {"copy": bench_copy(torch, do_bench)}
    failed_labs = []
    for nb_path in chosen:
        print(f"{labs.rel(nb_path)}:", flush=True)
        try:
            rec = bench_lab(torch, do_bench, nb_path, unavailable)
        except Exception as exc:  # noqa: BLE001 - one lab must not stop the others
            print(f"  FAILED, no record written: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            failed_labs.append(labs.rel(nb_path))
            continue
        if not rec["results"]:
            print("  no rung could be measured: no record written (the old one is kept)", flush=True)
            failed_labs.append(labs.rel(nb_path))
            continue
        records[rec["lab"].replace("/", "-")] = rec
    for name, rec in records.items():
        rec["provenance"] = prov
        (out_dir / f"{name}.json").write_text(json.dumps(rec, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    copy_peak = max(r["gbps"] for r in records["copy"]["results"])
    print(f"\n{'record':28s} {'rung':24s} {'n':>12s} {'time (us)':>10s} {'GB/s':>8s} {'% copy':>7s}")
    for name, rec in records.items():
        largest = max(r["n"] for r in rec["results"])
        for r in rec["results"]:
            if r["n"] == largest:
                print(f"{name:28s} {r['rung']:24s} {r['n']:>12,d} {r['time_ms'] * 1e3:10.1f} "
                      f"{r['gbps']:8.1f} {100 * r['gbps'] / copy_peak:6.1f}%")
    print(f"records written to {out_dir}")
    skipped = [(name, m) for name, rec in records.items() for m in rec.get("not_measured", [])]
    if skipped:
        print(f"\nNOT MEASURED ({len(skipped)} rung-size pairs, listed under not_measured in their records):")
        for name, m in skipped:
            print(f"  {name:28s} {m['rung']:24s} n={m['n']:>11,d}  {m['reason'][:120]}")
    for res in env.values():
        if not res["ok"]:
            print(envcheck.message(res))
    if failed_labs:
        print("labs that failed (their old records are kept): " + ", ".join(failed_labs))
    broken = failed_labs or any(not m["reason"].split(" ")[0] in {f"{fw}" for fw in unavailable} for _, m in skipped)
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
