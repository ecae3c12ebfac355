"""Checkpoint interval under random failures: Young's and Daly's formulas, Daly's exact expectation, a Monte
Carlo simulator that checks it, and a median/MAD straggler detector. Used by docs/runtime/scheduling-fault-tolerance.md
and tested by tests/test_runtime_collectives.py.
"""
from __future__ import annotations

import math

import numpy as np


# --8<-- [start:formulas]
def young_interval(delta: float, mtbf: float) -> float:
    """Young (1974): first-order optimum of the compute time between checkpoints, sqrt(2 * delta * M)."""
    return math.sqrt(2 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly (2006): higher-order optimum; valid for delta < 2M, otherwise checkpointing every M is the answer."""
    if delta >= 2 * mtbf:
        return mtbf
    x = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def expected_wall_time(tau, delta: float, mtbf: float, restart: float, work: float):
    """Daly's exact expected wall-clock time for `work` seconds of computation cut into segments of tau,
    each followed by a checkpoint of delta; failures are Poisson with mean time mtbf (also during checkpoints
    and restarts); after a failure the job pays `restart` and redoes the current segment."""
    tau = np.asarray(tau, dtype=float)
    return work / tau * mtbf * math.exp(restart / mtbf) * np.expm1((tau + delta) / mtbf)


def optimal_interval_numeric(delta: float, mtbf: float, restart: float = 0.0) -> float:
    """Minimise expected_wall_time over tau (golden-section search on log tau; the function is unimodal)."""
    f = lambda lt: float(expected_wall_time(math.exp(lt), delta, mtbf, restart, 1.0))  # noqa: E731
    a, b = math.log(delta * 1e-3 + 1e-9), math.log(10 * mtbf)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(200):
        if f(c) < f(d):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    return math.exp((a + b) / 2)
# --8<-- [end:formulas]


# --8<-- [start:simulate]
def simulate_wall_time(tau: float, delta: float, mtbf: float, restart: float, segments: int,
                       runs: int = 2000, seed: int = 0) -> np.ndarray:
    """Monte Carlo of the same process, vectorised over runs: returns the wall time of each run."""
    rng = np.random.default_rng(seed)
    wall = np.zeros(runs)
    seg = tau + delta
    for _ in range(segments):
        pending = np.ones(runs, dtype=bool)
        while pending.any():
            idx = np.flatnonzero(pending)
            t_fail = rng.exponential(mtbf, idx.size)
            ok = t_fail >= seg
            wall[idx[ok]] += seg  # segment and its checkpoint finished before the next failure
            pending[idx[ok]] = False
            bad = idx[~ok]
            wall[bad] += t_fail[~ok]  # the work since the last checkpoint is lost
            rest = np.ones(bad.size, dtype=bool)  # restart, which can itself be hit by a failure
            while rest.any():
                j = np.flatnonzero(rest)
                t2 = rng.exponential(mtbf, j.size)
                done = t2 >= restart
                wall[bad[j[done]]] += restart
                wall[bad[j[~done]]] += t2[~done]
                rest[j[done]] = False
    return wall
# --8<-- [end:simulate]


# --8<-- [start:straggler]
def find_stragglers(step_times: np.ndarray, threshold: float = 5.0) -> list[int]:
    """step_times[rank, step]: flag ranks whose median step time is more than `threshold` robust standard
    deviations (1.4826 * MAD across ranks) above the median rank. Medians ignore one-off hiccups."""
    per_rank = np.median(step_times, axis=1)
    med = np.median(per_rank)
    mad = 1.4826 * np.median(np.abs(per_rank - med))
    scale = max(mad, 1e-3 * med)  # identical ranks give MAD 0: fall back to 0.1 % of the median
    return [int(r) for r in np.flatnonzero((per_rank - med) / scale > threshold)]
# --8<-- [end:straggler]
