"""The benchmark survives a broken environment: a framework that cannot run gets one clear message
(packages, versions, fix), its rungs are recorded as not measured, and the other rungs still run."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT

sys.path.insert(0, str(ROOT))

from bench import envcheck  # noqa: E402
from bench.__main__ import resolve_reference, run_rungs  # noqa: E402

ROW_STACK = "AttributeError: module 'numpy' has no attribute 'row_stack'"


def _fake_broken_numba(tmp_path):
    """A `numba` package whose `cuda` import fails the way numba-cuda 0.30.4 does under numpy 2.5."""
    pkg = tmp_path / "numba"
    pkg.mkdir()
    # numba-cuda's use of np.row_stack under numpy >= 2.5, reproduced without depending on numpy's version
    # (raised by the package itself: the installed numba-cuda hooks the `numba.cuda` submodule's import)
    (pkg / "__init__.py").write_text("raise AttributeError(\"module 'numpy' has no attribute 'row_stack'\")\n")
    return {"PYTHONPATH": str(tmp_path)}


def test_broken_numba_import_gives_one_message_with_packages_versions_and_fix(tmp_path):
    res = envcheck.probe("numba-cuda", env=_fake_broken_numba(tmp_path))
    assert not res["ok"]
    assert "row_stack" in res["error"]
    msg = envcheck.message(res)
    assert msg.startswith("ENVIRONMENT: numba-cuda cannot run a kernel here")
    for pkg in ("numba-cuda", "numba", "numpy"):
        assert f"{pkg} " in msg  # each package named with its version
    assert "numpy below 2.5" in msg and "NVIDIA/numba-cuda#907" in msg


def test_check_frameworks_prints_once_per_broken_framework(tmp_path):
    lines = []
    res = envcheck.check_frameworks(("numba-cuda",), printer=lines.append, env=_fake_broken_numba(tmp_path))
    assert not res["numba-cuda"]["ok"]
    assert len(lines) == 1 and "why and fix" in lines[0]


def test_known_combination_is_recognised_from_versions_alone():
    assert "numpy below 2.5" in envcheck.expected_breakage({"numba-cuda": "0.30.4", "numpy": "2.5.2"})
    assert envcheck.expected_breakage({"numba-cuda": "0.30.4", "numpy": "2.4.6"}) is None


def test_other_rungs_proceed_and_numba_rungs_are_recorded_as_not_measured():
    calls = []
    case = {"runs": {"numba-naive": lambda: calls.append("numba"), "triton": lambda: calls.append("triton"),
                     "torch-ref": lambda: calls.append("torch"),
                     "triton-wrong": lambda: calls.append("wrong")},
            "reset": lambda: None, "bytes": 8, "flops": 2, "dtype": "float32"}

    def check(rung):
        assert rung != "triton-wrong", "poisoned output"

    case["check"] = check
    results, skipped = run_rungs(case, 1024, timer=lambda fn: 0.5, sync=lambda: None,
                                 unavailable={"numba-cuda": ROW_STACK}, log=lambda m: None)
    assert [r["rung"] for r in results] == ["triton", "torch-ref"]
    assert results[0]["time_ms"] == 0.5 and results[0]["gbps"] == 8 / 0.5 / 1e6
    assert "numba" not in calls  # never launched
    reasons = {s["rung"]: s["reason"] for s in skipped}
    assert reasons["numba-naive"].startswith("numba-cuda unavailable") and "row_stack" in reasons["numba-naive"]
    assert reasons["triton-wrong"].startswith("AssertionError")  # a failing rung is listed, not dropped


def test_stub_lets_a_lab_define_numba_kernels_without_numba(tmp_path):
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(ROOT)!r})
        from bench import envcheck
        envcheck.stub_numba()
        from numba import cuda, float32
        import numba.cuda

        @cuda.jit(device=True)
        def f(x):
            return x

        @cuda.jit
        def k(a):
            s = cuda.shared.array(4, float32)

        d = cuda.as_cuda_array(object())
        print("loaded", type(k).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "loaded _Unavailable" in out.stdout


def test_a_list_of_references_resolves_to_the_fastest_measured():
    results = [{"rung": r, "n": 4096, "tflops": t} for r, t in
               (("triton", 360.0), ("sdpa-flash", 300.0), ("sdpa-cudnn", 440.0), ("sdpa-efficient", 130.0))]
    ref = resolve_reference({"triton": ["sdpa-flash", "sdpa-cudnn", "sdpa-efficient"], "naive": "sdpa-flash"},
                            results, "tflops")
    assert ref == {"triton": "sdpa-cudnn", "naive": "sdpa-flash"}
