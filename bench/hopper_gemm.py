"""`python -m bench.hopper_gemm [--sizes 4096 8192] [--out DIR]`: the hand-written Hopper GEMM against cuBLAS.

Builds code/operator/hopper-gemm.cu as a shared library (nvcc -arch=sm_90a -DHOPPER_GEMM_LIBRARY), calls
its five rungs through ctypes on PyTorch's current stream, and times them with `triton.testing.do_bench`
in the same process as `torch.matmul` (cuBLAS) on the same bf16 tensors: the comparison the page quotes.
Every rung is first checked on a NaN-poisoned output against a float32 reference with the bound
K·2⁻²³·Σ|a||b| + 2⁻⁸|c| (accumulation, then the bf16 rounding of the output). The record goes to
DIR/<gpu>/operator-hopper-gemm.json (default DIR: data/bench) in the schema of `python -m bench`.

Needs a Hopper GPU (sm_90) and nvcc; without them it says so and exits with status 2.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.__main__ import SCHEMA_VERSION, WARMUP_MS, REP_MS, _timing  # noqa: E402
from bench.provenance import gpu_slug, provenance  # noqa: E402

SOURCE = ROOT / "code" / "operator" / "hopper-gemm.cu"
RUNG_LABELS = {
    "torch-bf16": "torch.matmul bf16, A @ B.T (cuBLAS)",
    "cuda-tma-wgmma": "CUDA: TMA + wgmma, one stage, 128x128 tile, 1 warpgroup",
    "cuda-pipelined": "CUDA: TMA + wgmma, 4-stage mbarrier pipeline, 128x128 tile",
    "cuda-warp-specialized": "CUDA: producer/2 consumer warpgroups, setmaxnreg, 128x256 tile, 4 stages",
    "cuda-persistent": "CUDA: warp-specialized + persistent grid (one block per SM), grouped tile order",
    "cuda-overlapped": "CUDA: persistent + one wgmma group kept in flight (wait_group 1)",
}


def build_library(tmp: Path) -> Path:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc not found: the CUDA toolkit is needed to build code/operator/hopper-gemm.cu")
    lib = tmp / "libhopper_gemm.so"
    subprocess.run([nvcc, "-O3", "-arch=sm_90a", "-Xcompiler", "-fPIC", "-shared", "-DHOPPER_GEMM_LIBRARY",
                    "-o", str(lib), str(SOURCE)], check=True)
    return lib


def load(lib_path: Path):
    lib = ctypes.CDLL(str(lib_path))
    lib.hopper_gemm.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    lib.hopper_gemm.restype = ctypes.c_int
    lib.hopper_gemm_rung_name.restype = ctypes.c_char_p
    names = [lib.hopper_gemm_rung_name(i).decode() for i in range(lib.hopper_gemm_rungs())]
    return lib, names


def occupancy(lib, names: list[str]) -> dict[str, int]:
    """Thread blocks of each rung that fit on one SM at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor)."""
    return {f"cuda-{name}": lib.hopper_gemm_blocks_per_sm(i) for i, name in enumerate(names)}


def measure(torch, do_bench, lib, names: list[str], n: int) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float().T
    bound = n * 2.0**-23 * (a.float().abs() @ b.float().abs().T) + 2.0**-8 * ref.abs()
    del gen
    stream = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # noqa: E731

    def cuda_rung(i):
        def run():
            rc = lib.hopper_gemm(i, a.data_ptr(), b.data_ptr(), out.data_ptr(), n, n, n, stream())
            if rc != 0:
                raise RuntimeError(f"rung {names[i]} does not support {n}^3 (returned {rc})")
        return run

    runs = {"torch-bf16": lambda: torch.matmul(a, b.T, out=out)}
    runs.update({f"cuda-{name}": cuda_rung(i) for i, name in enumerate(names)})
    flops, nbytes = 2 * n**3, 3 * n * n * 2  # read A and B, write C once: the least traffic
    results = []
    for rung, fn in runs.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = (out.float() - ref).abs()
        bad = int((~(err <= bound)).sum())  # NaN counts as wrong
        if bad:
            raise AssertionError(f"{rung} at n={n}: {bad} elements outside the bound (largest error/bound "
                                 f"{float((err / bound).nan_to_num(float('inf')).max()):.3g})")
        ms = do_bench(fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")
        results.append({"rung": rung, "n": n, "dtype": "bfloat16", "bytes": nbytes, "flops": flops, "time_ms": ms,
                        "gbps": nbytes / ms / 1e6, "tflops": flops / ms / 1e9})
        print(f"  {rung:24s} n={n:>6d}  {ms:8.3f} ms  {results[-1]['tflops']:7.1f} TFLOP/s", flush=True)
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hopper_gemm", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192], help="M = N = K")
    parser.add_argument("--out", default=str(ROOT / "data" / "bench"), help="folder for the JSON record")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("python -m bench.hopper_gemm needs PyTorch with CUDA.")
        return 2
    if not torch.cuda.is_available() or torch.cuda.get_device_capability(0)[0] != 9:
        print("python -m bench.hopper_gemm needs a Hopper GPU (sm_90: wgmma, setmaxnreg); none is visible here.\n"
              "Nothing was measured. The H200 record is data/bench/nvidia-h200/operator-hopper-gemm.json.")
        return 2
    from triton.testing import do_bench

    with tempfile.TemporaryDirectory() as tmp:
        lib, names = load(build_library(Path(tmp)))
        blocks = occupancy(lib, names)
        print("thread blocks per SM:", blocks, flush=True)
        results = []
        for n in args.sizes:
            results += measure(torch, do_bench, lib, names, n)
    prov = provenance(torch, [])
    shown = ["--sizes", *map(str, args.sizes)]  # the output folder is not part of the provenance
    prov["command"] = "python -m bench.hopper_gemm " + " ".join(shown)
    record = {"schema": SCHEMA_VERSION, "lab": "operator/hopper-gemm", "title": "Hopper 上手写的 bf16 GEMM（TMA、wgmma、warp 专门化、持久化）",
              "metric": "tflops", "rung_labels": {r: RUNG_LABELS.get(r, r) for r in dict.fromkeys(x["rung"] for x in results)},
              "timing": _timing(), "results": results, "blocks_per_sm": blocks,
              "reference": {r: "torch-bf16" for r in dict.fromkeys(x["rung"] for x in results) if r != "torch-bf16"},
              "provenance": prov}
    out_dir = Path(args.out) / gpu_slug(prov["gpu"])
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "operator-hopper-gemm.json"
    path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    largest = max(args.sizes)
    cublas = next(r["tflops"] for r in results if r["n"] == largest and r["rung"] == "torch-bf16")
    for r in results:
        if r["n"] == largest:
            print(f"{r['rung']:24s} {r['tflops']:7.1f} TFLOP/s  {100 * r['tflops'] / cublas:5.1f} % of cuBLAS")
    print(f"record written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
