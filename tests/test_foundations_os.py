"""Listings of the operating-systems chapter (docs/foundations/os/) checked against references: OSTEP's worked
scheduling and page-replacement examples, the kernel's weight table, fd passing, and ThreadSanitizer's lock-order report;
also the handwritten algorithm questions (docs/foundations/algorithms/handwritten.md).
The C/C++ listings also run under ASan + UBSan in tests/test_listings.py."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

OS = ROOT / "code" / "foundations" / "os"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), OS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- scheduling.py
@pytest.mark.parametrize("jobs, policy, turnaround, response", [
    ({"A": (0, 100), "B": (0, 10), "C": (0, 10)}, "fifo", 110, 70),     # OSTEP 7.3: the convoy effect
    ({"A": (0, 100), "B": (0, 10), "C": (0, 10)}, "sjf", 50, 10),       # OSTEP 7.4
    ({"A": (0, 100), "B": (10, 10), "C": (10, 10)}, "sjf", 310 / 3, 190 / 3),  # OSTEP 7.4: late arrivals
    ({"A": (0, 100), "B": (10, 10), "C": (10, 10)}, "stcf", 50, 10 / 3),  # OSTEP 7.5
    ({"A": (0, 5), "B": (0, 5), "C": (0, 5)}, "sjf", 10, 5),            # OSTEP 7.7
    ({"A": (0, 5), "B": (0, 5), "C": (0, 5)}, "rr", 14, 1),             # OSTEP 7.7, time slice 1
])
def test_policies_match_ostep_examples(jobs, policy, turnaround, response):
    m = load("scheduling")
    got = m.simulate(jobs, policy)
    assert got["turnaround"] == pytest.approx(turnaround)
    assert got["response"] == pytest.approx(response)


def test_cfs_shares_follow_weights():
    m = load("scheduling")
    nices = {"a": 0, "b": 5, "c": -5}
    shares = m.cfs_shares(nices)
    weights = {k: m.NICE_TO_WEIGHT[v] for k, v in nices.items()}
    total = sum(weights.values())
    for k in nices:  # the simulation rounds to whole ticks: 1e-3 of 100 000 ticks is 100 ticks
        assert shares[k] == pytest.approx(weights[k] / total, abs=1e-3)
    # neighbouring nice levels differ by about 1.25x (kernel/sched/core.c)
    assert 1.2 < m.NICE_TO_WEIGHT[0] / m.NICE_TO_WEIGHT[1] < 1.3
    assert 1.2 < m.NICE_TO_WEIGHT[-1] / m.NICE_TO_WEIGHT[0] < 1.3


# ----------------------------------------------------------------------------- fd-passing.py
def test_memfd_passed_over_unix_socket():
    m = load("fd-passing")
    values, socket_bytes = m.child_fills_shared_memory(4096)
    assert values == [i * i for i in range(4096)]
    assert socket_bytes == 1  # 32 KiB went through shared memory; the socket carried one byte and a descriptor


def test_sigterm_handler_sets_flag_and_loop_checkpoints():
    m = load("fd-passing")
    assert m.sigterm_checkpoint() == ["step 0", "step 1", "step 2", "checkpoint at step 3"]


# ----------------------------------------------------------------------------- page-replacement.py
def test_replacement_matches_ostep_and_belady():
    m = load("page-replacement")
    ostep = [0, 1, 2, 0, 1, 3, 0, 3, 1, 2, 1]  # OSTEP ch. 22, cache of 3 pages
    assert {p: m.faults(ostep, 3, p) for p in ("opt", "lru", "fifo")} == {"opt": 5, "lru": 5, "fifo": 7}
    belady = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]
    assert (m.faults(belady, 3, "fifo"), m.faults(belady, 4, "fifo")) == (9, 10)  # more frames, more faults
    assert (m.faults(belady, 3, "lru"), m.faults(belady, 4, "lru")) == (10, 8)


def test_opt_is_a_lower_bound_and_lru_is_a_stack_algorithm():
    import random
    m = load("page-replacement")
    rng = random.Random(5)
    for _ in range(200):
        refs = [rng.randrange(8) for _ in range(60)]
        for frames in range(1, 7):
            best = m.faults(refs, frames, "opt")
            assert all(best <= m.faults(refs, frames, p) for p in ("fifo", "lru", "clock"))
            assert m.faults(refs, frames + 1, "lru") <= m.faults(refs, frames, "lru")


# ----------------------------------------------------------------------------- lock-order.cpp under TSan
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_tsan_reports_the_lock_order_inversion(tmp_path):
    exe = tmp_path / "lock-order"
    subprocess.run(["g++", "-std=c++20", "-g", "-fsanitize=thread", str(OS / "lock-order.cpp"), "-o", str(exe), "-pthread"],
                   check=True, capture_output=True, timeout=300)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TSAN_OPTIONS": "halt_on_error=0"})
    assert "ThreadSanitizer: lock-order-inversion (potential deadlock)" in proc.stderr, proc.stderr[-2000:]
    assert "potential deadlock accounts -> ledger -> accounts" in proc.stdout


# ----------------------------------------------------------------------------- algorithms/ (handwritten questions)
ALG = ROOT / "code" / "foundations" / "algorithms"


def load_alg(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), ALG / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_top_k_matches_sorting():
    import random
    m = load_alg("topk-blocking")
    rng = random.Random(3)
    for _ in range(300):
        data = [rng.randrange(-50, 50) for _ in range(rng.randrange(0, 200))]
        for k in (0, 1, 5, 50, 500):
            assert m.top_k(iter(data), k) == sorted(data, reverse=True)[:k]


@pytest.mark.parametrize("n, kk, mm, block", [(37, 29, 41, 8), (64, 64, 64, 16), (5, 70, 3, 32)])
def test_blocked_transpose_and_matmul_match_naive(n, kk, mm, block):
    import random
    m = load_alg("topk-blocking")
    rng = random.Random(n)
    a = [[rng.randint(-9, 9) for _ in range(kk)] for _ in range(n)]
    b = [[rng.randint(-9, 9) for _ in range(mm)] for _ in range(kk)]
    # small integers: every partial sum is exact in floating point, so blocked and naive agree exactly
    assert m.matmul_blocked(a, b, block) == m.matmul_naive(a, b)
    assert m.transpose_blocked(a, block) == [list(col) for col in zip(*a)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_spsc_ring_is_race_free_under_tsan(tmp_path):
    exe = tmp_path / "spsc"
    subprocess.run(["g++", "-std=c++20", "-g", "-fsanitize=thread", str(ALG / "spsc-ring.cpp"), "-o", str(exe), "-pthread"],
                   check=True, capture_output=True, timeout=300)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ThreadSanitizer" not in proc.stderr, proc.stderr[-2000:]
    assert "spsc ring ok: 1000000 items in order" in proc.stdout
