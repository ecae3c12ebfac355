"""On a machine with an NVIDIA GPU: run every lab top to bottom in GPU mode and every CUDA listing.

`python -m bench.gpu_check [--out DIR] [--jobs N] [--merge] [NB_OR_CU ...]` (`make gpu-check`,
`make gpu-check GPU_PYTHON=/path/to/python` for an interpreter whose torch is a CUDA build)

CI has no GPU, so the labs' GPU paths (larger sizes, PTX inspection, live timing) and the `.cu`
listings' self-checks run here only. Each lab runs in its own process (a crash or a CUDA error in one
does not hide the others); each `.cu` file is compiled with `nvcc -arch=sm_90` (or the GPU's own
architecture) and its self-checking `main` must exit 0 and print PASS (a listing may ask for extra
nvcc options, or for more builds, in `// nvcc-flags:` / `// nvcc-variant:` lines: see cuda_builds; one
that needs a newer GPU names its architectures in a `// nvcc-arch:` line and is not run on older ones:
see cuda_archs).
A JSON summary with the GPU, driver and library versions is written to DIR/gpu-check.json (`--merge`
keeps the other items of an existing one, so a long check can be split into runs); the exit status
is 1 if anything failed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import envcheck  # noqa: E402
from bench.provenance import provenance  # noqa: E402
from tools import labs  # noqa: E402


def missing_packages(path: Path) -> list[str]:
    """The lab's declared packages (its setup cell) that this interpreter lacks, as pip requirements."""
    import ast
    import re
    from importlib import util

    # The setup cell's list, written where every package was installed: recomputing it here would miss
    # exactly the packages this interpreter lacks (their modules map to no installed distribution).
    setup = next(labs._source(c) for c in labs.load(path)["cells"] if c.get("cell_type") == "code")
    m = re.search(r"^LAB_PACKAGES = (\{.*?^\})", setup, flags=re.M | re.S) or re.search(r"^LAB_PACKAGES = (\{\})", setup, flags=re.M)
    packages = ast.literal_eval(m.group(1)) if m else {}
    return [f"{dist}=={version}" for dist, (version, module) in packages.items() if util.find_spec(module) is None]


def run_lab(path: Path, timeout: int) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tools.labs", "plain", labs.rel(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "MPLBACKEND": "Agg"})
    return {"item": labs.rel(path), "ok": proc.returncode == 0, "seconds": round(time.perf_counter() - t0, 1),
            "tail": (proc.stdout + proc.stderr)[-4000:]}


def uses(path: Path, framework: str) -> bool:
    """Whether a lab's code imports the framework (only numba-cuda can be missing while the rest runs)."""
    module = {"numba-cuda": "numba"}.get(framework)
    if module is None:
        return True
    code = "\n".join(labs._source(c) for c in labs.load(path)["cells"] if c.get("cell_type") == "code")
    return f"from {module} import" in code or f"import {module}" in code


_NVCC_HEADER = re.compile(r"^//\s*nvcc-(flags|variant|arch):(.*)$")


def cuda_builds(path: Path) -> list[list[str]]:
    """The extra nvcc options of each build of a CUDA listing, read from `//` lines at its top:

        // nvcc-flags: -rdc=true -lcudadevrt      added to every build (device-side launches need them)
        // nvcc-variant: -use_fast_math -DX        one more build with these options added

    A listing without such lines is built once with no extra options. The tests compile every build
    for sm_90 and sm_80; `make gpu-check` runs every build, and each must exit 0 and print PASS."""
    flags: list[str] = []
    variants: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("//") and line.strip():
            break  # the header ends at the first line that is neither a comment nor blank
        m = _NVCC_HEADER.match(line.strip())
        if m and m.group(1) == "flags":
            flags += shlex.split(m.group(2))
        elif m and m.group(1) == "variant":
            variants.append(shlex.split(m.group(2)))
    return [flags] + [flags + v for v in variants]


def cuda_archs(path: Path) -> list[str] | None:
    """The architectures a listing is built for, from a `// nvcc-arch:` line among the same header lines:

        // nvcc-arch: sm_90                        only for these (it uses clusters, cp.async.bulk, ...)

    None when the listing has no such line (the tests then build it for sm_90 and sm_80). `make gpu-check`
    runs a listing with the line only on a GPU at least as new as the oldest architecture it names."""
    archs: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("//") and line.strip():
            break
        m = _NVCC_HEADER.match(line.strip())
        if m and m.group(1) == "arch":
            archs += shlex.split(m.group(2))
    return archs or None


def _arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch.split("_", 1)[-1]) or 0)


def build_arch(path: Path, arch: str) -> str:
    """The -arch to build a listing with on a GPU of architecture `arch`: the arch-specific target
    (`sm_90a`: wgmma, setmaxnreg) when the listing's `// nvcc-arch:` line names it, else `arch` itself."""
    specific = f"{arch}a"
    return specific if specific in (cuda_archs(path) or []) else arch


def run_cuda(path: Path, arch: str, timeout: int) -> dict:
    nvcc = shutil.which("nvcc")
    item = path.relative_to(ROOT).as_posix()
    if nvcc is None:
        return {"item": item, "ok": False, "seconds": 0, "tail": "nvcc not found on this machine"}
    needs = cuda_archs(path)
    # an arch-specific target (sm_90a) runs only on that GPU: a newer one has no wgmma/setmaxnreg
    specific_only = bool(needs) and all(a.endswith("a") for a in needs) and build_arch(path, arch) not in needs
    if needs and (_arch_number(arch) < min(_arch_number(a) for a in needs) or specific_only):
        return {"item": item, "ok": False, "not_run": True, "seconds": 0,
                "tail": f"needs {' or '.join(needs)} (its `// nvcc-arch:` line); this GPU is {arch}"}
    t0 = time.perf_counter()
    ok, tails = True, []
    for extra in cuda_builds(path):
        with tempfile.TemporaryDirectory() as tmp:
            exe = Path(tmp) / "a.out"
            build = subprocess.run([nvcc, "-O3", f"-arch={build_arch(path, arch)}", "-o", str(exe), str(path), *extra],
                                   capture_output=True, text=True, timeout=timeout)
            if build.returncode != 0:
                return {"item": item, "ok": False, "seconds": 0, "tail": build.stderr[-4000:]}
            proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
        out = proc.stdout + proc.stderr
        ok = ok and proc.returncode == 0 and "PASS" in out
        tails.append((f"[nvcc {' '.join(extra)}]\n" if extra else "") + out)
    tail = "\n".join(tails)
    return {"item": item, "ok": ok, "seconds": round(time.perf_counter() - t0, 1), "tail": tail[-4000:]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("items", nargs="*", help="labs (notebooks/…/x.ipynb) and CUDA files (code/…/x.cu); default: all")
    parser.add_argument("--out", default=str(ROOT / "test-results"), help="folder for gpu-check.json")
    parser.add_argument("--timeout", type=int, default=300, help="seconds allowed for each lab or listing")
    parser.add_argument("--jobs", type=int, default=1, help="labs run at once (listings always one at a time)")
    parser.add_argument("--merge", action="store_true", help="keep the other items of an existing gpu-check.json")
    parser.add_argument("--print-missing", action="store_true",
                        help="print the pinned packages the labs need that this interpreter lacks (for pip install), and exit")
    args = parser.parse_args(argv)
    if args.print_missing:
        print(" ".join(sorted({req for p in labs.iter_notebooks() for req in missing_packages(p)})))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("python -m bench.gpu_check needs an NVIDIA GPU, and none is visible here; nothing was run.")
        hint = envcheck.cpu_build_hint(torch, "gpu-check")
        if hint:
            print(hint)
        return 2
    env = envcheck.check_frameworks(printer=lambda m: print(m, flush=True))
    if not env["torch-cuda"]["ok"]:
        print("PyTorch cannot run a CUDA kernel here; nothing was run.")
        return 2
    major, minor = torch.cuda.get_device_capability(0)
    arch = f"sm_{major}{minor}"
    items = [ROOT / i for i in args.items] or [*labs.iter_notebooks(), *sorted((ROOT / "code").rglob("*.cu"))]

    def one(path: Path) -> dict:
        needs = [fw for fw, r in env.items() if not r["ok"] and path.suffix == ".ipynb" and uses(path, fw)]
        if needs:  # a lab that needs a framework that cannot run here: said so, not run, not hidden
            return {"item": labs.rel(path), "ok": False, "not_run": True, "seconds": 0,
                    "tail": "; ".join(envcheck.message(env[fw]) for fw in needs)}
        lacking = missing_packages(path) if path.suffix == ".ipynb" else []
        if lacking:
            return {"item": labs.rel(path), "ok": False, "not_run": True, "seconds": 0,
                    "tail": f"packages missing from {sys.executable}: pip install {' '.join(lacking)}"}
        try:
            return run_cuda(path, arch, args.timeout) if path.suffix == ".cu" else run_lab(path, args.timeout)
        except subprocess.TimeoutExpired:
            return {"item": path.relative_to(ROOT).as_posix(), "ok": False, "seconds": args.timeout, "tail": "timed out"}

    def report(res: dict) -> None:
        word = "NOT RUN" if res.get("not_run") else ("PASS" if res["ok"] else "FAIL")
        print(f"{word:7s} {res['seconds']:7.1f} s  {res['item']}", flush=True)
        if not res["ok"]:
            print("    " + res["tail"].replace("\n", "\n    "), flush=True)

    from concurrent.futures import ThreadPoolExecutor

    results = []
    notebooks = [p for p in items if p.suffix == ".ipynb"]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for res in pool.map(one, notebooks):
            report(res)
            results.append(res)
    for path in (p for p in items if p.suffix != ".ipynb"):
        res = one(path)
        report(res)
        results.append(res)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance(torch, [])
    prov["command"] = " ".join(["python -m bench.gpu_check", *args.items])
    prov["environment"] = {fw: {"ok": r["ok"], "packages": r["packages"], **({} if r["ok"] else {"error": r["error"]})}
                           for fw, r in env.items()}
    target = out / "gpu-check.json"
    for res in results:  # each item says which commit and date it ran at, so a merged file stays honest
        res.setdefault("commit", prov.get("commit"))
        res.setdefault("date", prov.get("date"))
    if args.merge and target.exists():
        done = {r["item"] for r in results}
        old = json.loads(target.read_text(encoding="utf-8"))
        old_prov = old.get("provenance", {})
        kept = [{"commit": old_prov.get("commit"), "date": old_prov.get("date"), **r}
                for r in old["results"] if r["item"] not in done]
        results = kept + results
        results.sort(key=lambda r: (not r["item"].startswith("notebooks/"), r["item"]))
        prov["commands"] = [*old_prov.get("commands", [old_prov.get("command")] if old_prov.get("command") else []),
                            prov["command"]]
        if old_prov.get("note"):
            prov["earlier_note"] = old_prov["note"]
    summary = {"provenance": prov, "arch": arch, "results": results}
    target.write_text(json.dumps(summary, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    failed = [r["item"] for r in results if not r["ok"] and not r.get("not_run")]
    not_run = [r["item"] for r in results if r.get("not_run")]
    print(f"\n{sum(r['ok'] for r in results)}/{len(results)} passed" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; not run: {', '.join(not_run)}" if not_run else ""))
    for res in env.values():
        if not res["ok"]:
            print(envcheck.message(res))
    return 1 if failed or not_run else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
