"""The C listings behind the CPU labs (code/hardware/cache-sweep.c, branch-predict.c, false-sharing.c)
compute the right thing, checked against references computed here in Python.

tests/test_listings.py already runs each listing's self-check under ASan + UBSan; this file builds
them as the labs do (gcc -O1/-O2, no sanitizers) and checks the results of the measuring modes:
the branch program's sum equals a Python reimplementation of its generator, the bandwidth mode's
checksum is verified inside the program (it exits non-zero otherwise), the pointer chain is one
cycle, and the false-sharing counters are exact. Timings are not asserted here (see the labs).
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import ROOT

SRC = ROOT / "code" / "hardware"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed: the CPU listings were not built")


def build(tmp_path, name, *flags):
    exe = tmp_path / name.replace(".c", "")
    subprocess.run(["gcc", *flags, "-o", str(exe), str(SRC / name)], check=True, capture_output=True, timeout=120)
    return exe


def lcg_bytes(n: int) -> list[int]:
    """The generator of branch-predict.c: a 64-bit LCG (Knuth's MMIX constants), top byte."""
    x, out = 12345, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(x >> 56)
    return out


@pytest.mark.parametrize("variant", [[], ["-DMASK"], ["-DPLAIN"]], ids=["branch", "mask", "plain"])
def test_branch_sum_matches_python(tmp_path, variant):
    exe = build(tmp_path, "branch-predict.c", "-O1", *variant)
    n = 5000
    out = subprocess.run([str(exe), str(n), "2"], capture_output=True, text=True, check=True, timeout=60).stdout
    m = re.fullmatch(r"sorted (\S+) unsorted (\S+) sum (\d+)\n", out)
    assert m, out
    assert int(m.group(3)) == sum(b for b in lcg_bytes(n) if b >= 128)
    assert float(m.group(1)) > 0 and float(m.group(2)) > 0


def test_cache_sweep_modes(tmp_path):
    exe = build(tmp_path, "cache-sweep.c", "-O2")
    selfcheck = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout
    assert "self-check ok: chain of 1000 lines visits each once, sum 499500" in selfcheck
    for mode in ("lat", "lath", "bw"):
        out = subprocess.run([str(exe), mode, str(1 << 16), "20000" if mode != "bw" else str(1 << 20)],
                             capture_output=True, text=True, check=True, timeout=60).stdout.split()
        assert out[0] == mode and int(out[1]) == 1 << 16  # 65536 bytes = 1024 lines of 64 B, exactly
        assert float(out[2]) > 0


def test_false_sharing_counters_exact(tmp_path):
    exe = build(tmp_path, "false-sharing.c", "-O2", "-pthread")
    out = subprocess.run([str(exe), "200000", "3"], capture_output=True, text=True, check=True, timeout=60).stdout
    # the program exits 1 if any increment is lost; it prints both timings otherwise
    assert re.fullmatch(r"same \d+\.\d+ separate \d+\.\d+\n", out), out


def test_layouts_in_the_listing():
    """The listing declares the two layouts the page describes: one 64-byte line, and 128-byte-aligned members."""
    text = (SRC / "false-sharing.c").read_text(encoding="utf-8")
    assert "_Alignas(64) volatile uint64_t a;\n    volatile uint64_t b;" in text
    assert text.count("_Alignas(128) volatile uint64_t") == 2


def test_page_amat_example_follows_the_formula():
    """docs/hardware/cpu-microarchitecture.md works one AMAT example by hand; recompute it."""
    def amat(t, m):  # t: hit times of L1, L2, L3, memory; m: local miss rates of L1, L2, L3
        return t[0] + m[0] * (t[1] + m[1] * (t[2] + m[2] * t[3]))

    times = (1, 4, 15, 100)
    base, worse = amat(times, (0.05, 0.3, 0.5)), amat(times, (0.10, 0.3, 0.5))
    assert base == pytest.approx(2.175) and worse == pytest.approx(3.35)
    text = (ROOT / "docs" / "hardware" / "cpu-microarchitecture.md").read_text(encoding="utf-8")
    assert "= 2.175$ ns" in text and "= 3.35$ ns" in text
    assert f"慢了约 {round(100 * (worse / base - 1))}%" in text
