"""code/compiler/polyhedral.py: isl's dependences against the hand-derived distance vectors (0, 1) and (1, -1); the
legality test against running the code isl generates (compiled with cc) next to the original loop; the committed
records against what the installed islpy prints."""
from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest

from conftest import ROOT

isl = pytest.importorskip("islpy")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import polyhedral as P  # noqa: E402

RECORDS = ROOT / "code" / "compiler" / "records"


def body(name):
    return "\n".join((RECORDS / name).read_text().splitlines()[3:])


def test_distance_vectors_are_the_hand_derived_ones():
    dep = P.dependences()
    # S(i, j) reads A[i][j-1], written by S(i, j-1): distance (0, 1); reads A[i-1][j+1], written by S(i-1, j+1): (1, -1)
    expected = isl.UnionSet("[N, M] -> { [0, 1] : N >= 2 and M >= 4; [1, -1] : N >= 3 and M >= 4 }")
    assert P.distances(dep, P.ORIGINAL).is_equal(expected)


def test_legality_of_the_three_schedules():
    dep = P.dependences()
    assert P.violated(dep, P.ORIGINAL).is_empty()
    assert not P.violated(dep, P.TILED).is_empty()  # (1, -1) crosses tile boundaries backwards
    assert P.violated(dep, P.SKEWED_TILED).is_empty()
    sched_map = P.isl_schedule(dep).get_map()
    assert sched_map.is_equal(isl.UnionMap("[N, M] -> { S[i, j] -> [i, i + j] }"))  # the skew, found automatically


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
@pytest.mark.parametrize("shape", [(37, 29), (4, 5), (16, 16)])
def test_generated_code_runs_and_legality_predicts_the_result(shape):
    a = np.random.default_rng(1).standard_normal(shape)
    ref = P.reference(a)
    assert np.array_equal(P.compile_and_run(P.generate_c(P.ORIGINAL), a), ref)
    assert np.array_equal(P.compile_and_run(P.generate_c(P.SKEWED_TILED), a), ref)  # same operations, same order per element
    if shape[0] > 4 and shape[1] > 5:  # big enough for a dependence to cross a 4x4 tile boundary
        assert not np.array_equal(P.compile_and_run(P.generate_c(P.TILED), a), ref)


def test_records_match_islpy():
    import importlib.metadata

    assert (RECORDS / "isl-schedule.txt").read_text().startswith(f"# tool: islpy {importlib.metadata.version('islpy')}")
    assert body("isl-tiled-c.txt").strip() == P.generate_c(P.TILED).strip()
    assert body("isl-skewed-tiled-c.txt").strip() == P.generate_c(P.SKEWED_TILED).strip()
    assert body("isl-schedule.txt").strip() == str(P.isl_schedule(P.dependences())).strip()
