"""The checkpoint-interval figures of docs/runtime/scheduling-fault-tolerance.md, computed with
code/runtime/checkpoint_sim.py: Young's first-order optimum (CACM 17(9), 1974), Daly's higher-order estimate
(FGCS 22(3), 2006) checked against the optima Daly's paper itself prints, and the worked example (60 s or 5 s
per save, MTBF 3 h) that the page's table and interview answer quote."""
from __future__ import annotations

import math
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "runtime"))
import checkpoint_sim as ck  # noqa: E402

PAGE = ROOT / "docs" / "runtime" / "scheduling-fault-tolerance.md"
MTBF = 3 * 3600.0


def test_young_is_sqrt_2_delta_m():
    assert ck.young_interval(60, MTBF) == pytest.approx(math.sqrt(2 * 60 * 10800))
    assert ck.young_interval(60, MTBF) == pytest.approx(1138.42, abs=0.01)        # 18.97 min, "about 19 min"


@pytest.mark.parametrize("mtbf_min, printed_min, digits", [
    (24 * 60, 117, 0),     # Daly 2006, Fig. 3: M = 24 h, delta = 5 min -> "The new model predicts tau_opt = 117 min"
    (6 * 60, 57, 0),       # Fig. 4: M = 6 h -> 57 min
    (15, 9.1, 1),          # Fig. 5: M = 15 min -> 9.1 min (delta < 2M still holds)
])
def test_daly_reproduces_the_papers_own_optima(mtbf_min, printed_min, digits):
    """Daly's estimate does not depend on the restart time R, so the paper's three predictions (R = 10 min)
    pin down its form: sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9) delta/2M] - delta. Dropping the
    trailing -delta (121.7 min) or halving the 1/9 term (9.0 min) would not round to the printed values."""
    assert round(ck.daly_interval(5.0, mtbf_min), digits) == printed_min


def test_daly_beyond_its_range_checkpoints_every_mtbf():
    assert ck.daly_interval(10.0, 5.0) == 5.0 and ck.daly_interval(10.0, 4.0) == 4.0


def _example(delta):
    best = ck.optimal_interval_numeric(delta, MTBF)
    overhead = lambda tau: float(ck.expected_wall_time(tau, delta, MTBF, 0.0, 1.0)) - 1  # noqa: E731
    return ck.young_interval(delta, MTBF), ck.daly_interval(delta, MTBF), best, overhead(best), overhead(3600.0)


def test_worked_example_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    for delta, label in ((60, "60 s（同步）"), (5, "5 s（异步）")):
        young, daly, best, at_best, hourly = _example(delta)
        assert daly == pytest.approx(best, rel=1e-4)
        row = f"| {label} | {young:,.0f} s | {daly:,.0f} s | {100 * at_best:.1f}% | {100 * hourly:.1f}% |"
        assert row in page, row
    # the interview answer: 60 s saves, M = 3 h -> Young about 19 min, Daly about 18.3 min
    young, daly, *_ = _example(60)
    assert (round(young / 60), round(daly / 60, 1)) == (19, 18.3)
    assert f"约 {young:,.0f} s，即约 {round(young / 60)} 分钟" in page
    assert f"约 {daly:,.0f} s，即约 {daly / 60:.1f} 分钟" in page
    young5, daly5, *_ = _example(5)
    assert f"{young5:.0f} s 与 {daly5:.0f} s（约 {young5 / 60:.1f} 与 {daly5 / 60:.1f} 分钟）" in page
