"""code/hardware/systolic-array.v, simulated with Verilator through code/hardware/systolic-tb.cc,
computes C = A @ B exactly (int8 inputs, int32 accumulators) in K + 2(N - 1) cycles, and one cycle
fewer leaves only the last PE short of its last product. Skipped, with the reason, without Verilator."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from conftest import ROOT

SRC = ROOT / "code" / "hardware"
VERILATOR = shutil.which("verilator")
pytestmark = pytest.mark.skipif(VERILATOR is None, reason="verilator is not installed (Debian: apt-get install verilator): "
                                                          "the systolic-array RTL was not simulated")
N = 4


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    out = tmp_path_factory.mktemp("systolic")
    cmd = [VERILATOR, "--cc", "--exe", "--build", "-j", "2", "-Wall", "-Wno-DECLFILENAME", "-Wno-UNUSEDSIGNAL",
           f"-GN={N}", "-CFLAGS", f"-DSA_N={N}", "--top-module", "systolic_array", "-Mdir", str(out / "obj"),
           str(SRC / "systolic-array.v"), str(SRC / "systolic-tb.cc")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "obj" / "Vsystolic_array"


def run(sim, a, b, cycles=None):
    text = f"{a.shape[0]} {a.shape[1]}\n" + "\n".join(" ".join(map(str, r)) for r in a) + "\n" + \
        "\n".join(" ".join(map(str, r)) for r in b) + "\n"
    args = [str(sim)] + ([f"+cycles={cycles}"] if cycles is not None else [])
    lines = subprocess.run(args, input=text, capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()
    return int(lines[0].split()[1]), np.array([[int(x) for x in l.split()] for l in lines[1:]], dtype=np.int64)


@pytest.mark.parametrize("k", [1, 3, 32])
def test_matches_numpy_in_formula_cycles(sim, k):
    rng = np.random.default_rng(k)
    a, b = rng.integers(-128, 128, size=(N, k)), rng.integers(-128, 128, size=(k, N))
    cycles, c = run(sim, a, b)
    assert cycles == k + 2 * (N - 1)
    np.testing.assert_array_equal(c, a @ b)


def test_one_cycle_short(sim):
    rng = np.random.default_rng(7)
    k = 5
    a, b = rng.integers(-128, 128, size=(N, k)), rng.integers(-128, 128, size=(k, N))
    _, c = run(sim, a, b, cycles=k + 2 * (N - 1) - 1)
    ref = a @ b
    assert np.argwhere(c != ref).tolist() == [[N - 1, N - 1]]
    assert c[N - 1, N - 1] == ref[N - 1, N - 1] - a[N - 1, k - 1] * b[k - 1, N - 1]
