"""code/framework/dist_launch.py: results by rank, and a dead or failing rank reported at once, named."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dist_launch  # noqa: E402
import dist_workers  # noqa: E402


def test_results_come_back_by_rank():
    res = dist_launch.launch(dist_workers.echo, 3, timeout=60)
    assert [r["rank"] for r in res] == [0, 1, 2]
    assert all(r["sum"] == 6.0 for r in res)  # 1 + 2 + 3 through a real gloo all-reduce


def test_a_dead_rank_is_noticed_within_seconds():
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 died with exit code 3"):
        dist_launch.launch(dist_workers.one_dies, 2, timeout=60)
    # the survivor is blocked in all_reduce; without the liveness poll this took the full 60 s timeout
    assert time.monotonic() - t0 < 20


def test_a_failing_rank_reports_its_traceback():
    with pytest.raises(RuntimeError, match=r"(?s)rank 0:.*ValueError: planted failure on rank 0"):
        dist_launch.launch(dist_workers.one_raises, 2, timeout=60)


def test_a_worker_that_children_cannot_import_is_refused_up_front():
    def local(rank, world_size):
        return rank

    with pytest.raises(ValueError, match="importable module"):
        dist_launch.launch(local, 2)
