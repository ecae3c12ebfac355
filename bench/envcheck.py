"""Check, before anything is timed, that each framework the benchmarks use imports and runs a trivial kernel.

`python -m bench` and `python -m bench.gpu_check` call `check_frameworks()` first. Each probe runs in its
own interpreter (a failed import can leave a half-initialised module behind, and a crash must not take
the caller with it), so a broken combination of packages costs one clear message instead of a traceback
in the middle of a run. The rungs that need a framework that failed are recorded as not measured.

Known broken combinations are named with their fix, so the message says what to do, not only what broke.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from importlib import metadata

# Each probe prints one JSON line: {"ok": true} or raises. The kernels are the smallest that exercise the
# whole path (import, compile, launch, copy back), so an import that works but a launch that fails is caught.
PROBES = {
    "torch-cuda": """
import torch
x = torch.arange(4, device="cuda", dtype=torch.float32)
assert (x + 1).sum().item() == 10.0
""",
    "triton": """
import torch, triton, triton.language as tl
@triton.jit
def _inc(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
x = torch.zeros(16, device="cuda")
_inc[(1,)](x, BLOCK=16)
assert x.sum().item() == 16.0
""",
    "numba-cuda": """
import numpy as np
from numba import cuda
@cuda.jit
def _inc(x):
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] += 1
d = cuda.to_device(np.zeros(16, dtype=np.float32))
_inc[1, 16](d)
assert d.copy_to_host().sum() == 16.0
""",
}
PACKAGES = {"torch-cuda": ("torch",), "triton": ("triton", "torch"), "numba-cuda": ("numba-cuda", "numba", "numpy")}
# rung-name prefix -> framework the rung needs (the labs name their rungs by framework)
RUNG_FRAMEWORK = {"numba-": "numba-cuda"}


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _vtuple(v: str | None) -> tuple[int, ...]:
    out = []
    for part in (v or "0").split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def known_fix(framework: str, error: str, versions: dict[str, str | None]) -> str | None:
    """A diagnosis and fix for a combination known to break, else None."""
    if framework == "numba-cuda" and "row_stack" in error:
        return (f"numba-cuda {versions.get('numba-cuda')} registers an overload for np.row_stack, which numpy 2.5 "
                f"removed (numpy here: {versions.get('numpy')}). numba-cuda is in maintenance mode and no release "
                "fixes it (NVIDIA/numba-cuda#907; the guard in PR #916 was not merged). "
                "Fix: pin numpy below 2.5, e.g. `pip install \"numpy>=2.0,<2.5\"` (2.4.6 works), then run again.")
    return None


def expected_breakage(versions: dict[str, str | None]) -> str | None:
    """The same diagnosis from the installed versions alone, without importing anything (for the labs' setup cell)."""
    nc, np_ = versions.get("numba-cuda"), versions.get("numpy")
    if nc and np_ and _vtuple(nc) <= (0, 30, 4) and _vtuple(np_) >= (2, 5):
        return known_fix("numba-cuda", "row_stack", versions)
    return None


def probe(framework: str, timeout: int = 180, env: dict | None = None) -> dict:
    """Run one probe in a fresh interpreter; returns {"framework", "ok", "packages", "error", "fix"}."""
    versions = {p: version(p) for p in PACKAGES[framework]}
    code = PROBES[framework] + "\nimport json; print(json.dumps({'ok': True}))\n"
    import tempfile

    try:
        with tempfile.TemporaryDirectory() as tmp:  # a file, not -c: @triton.jit reads its function's source
            script = os.path.join(tmp, f"probe_{framework.replace('-', '_')}.py")
            with open(script, "w", encoding="utf-8") as fh:
                fh.write(code)
            proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, **(env or {})})
        ok = proc.returncode == 0 and '"ok": true' in proc.stdout
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        error = "" if ok else (lines[-1] if lines else f"exit status {proc.returncode}")
    except subprocess.TimeoutExpired:
        ok, error = False, f"the probe did not finish in {timeout} s"
    return {"framework": framework, "ok": ok, "packages": versions, "error": error,
            "fix": None if ok else known_fix(framework, error, versions)}


def message(result: dict) -> str:
    pkgs = ", ".join(f"{p} {v or 'not installed'}" for p, v in result["packages"].items())
    text = f"ENVIRONMENT: {result['framework']} cannot run a kernel here ({pkgs}): {result['error']}"
    if result["fix"]:
        text += f"\n  why and fix: {result['fix']}"
    return text


def check_frameworks(frameworks=("torch-cuda", "triton", "numba-cuda"), printer=print, **kw) -> dict[str, dict]:
    """Probe each framework; print one message for each that fails; return {framework: result}."""
    results = {fw: probe(fw, **kw) for fw in frameworks}
    for res in results.values():
        if not res["ok"]:
            printer(message(res))
    if all(r["ok"] for r in results.values()):
        printer("environment: " + ", ".join(f"{fw} ok" for fw in results))
    return results


def framework_of(rung: str) -> str | None:
    for prefix, fw in RUNG_FRAMEWORK.items():
        if rung.startswith(prefix):
            return fw
    return None


class _Unavailable:
    """Stands in for every name of a framework that cannot run: defining kernels and building cases still
    works (so a lab's other rungs run), and the rungs that would launch them are skipped by name."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        return _Unavailable(f"{self._name}()")

    def __getitem__(self, key):
        return _Unavailable(f"{self._name}[]")

    def __repr__(self):
        return f"<unavailable {self._name}>"


def _module_attr(module: str, attr: str):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Unavailable(f"{module}.{attr}")


def stub_numba() -> None:
    """Put a stand-in `numba` (and `numba.cuda`) in sys.modules so that labs importing it still load."""
    for name in ("numba", "numba.cuda"):
        mod = types.ModuleType(name)
        mod.__getattr__ = lambda attr, name=name: _module_attr(name, attr)  # type: ignore[attr-defined]
        mod.__path__ = []  # a package, so `from numba import cuda` and `import numba.cuda` both work
        mod.__unavailable__ = True
        sys.modules[name] = mod
    sys.modules["numba"].cuda = sys.modules["numba.cuda"]


if __name__ == "__main__":
    res = check_frameworks()
    print(json.dumps(res, indent=1))
    raise SystemExit(0 if all(r["ok"] for r in res.values()) else 1)


def cpu_build_hint(torch, target: str) -> str | None:
    """Why torch sees no GPU on a machine that has one: the locked environment's CPU build. None otherwise."""
    import shutil

    if shutil.which("nvidia-smi") and not torch.version.cuda:
        return (f"This interpreter ({sys.executable}) has torch {torch.__version__}, a CPU build (the locked "
                f"environment's). On a GPU machine run `make {target} GPU_PYTHON=python3` with an interpreter whose "
                "torch is a CUDA build (see README, GPU contributors).")
    return None
