"""code/compiler/tvm_matmul.py: every schedule step and every searched candidate equals NumPy's matmul; the sampled
search space only proposes perfect tilings; the committed TVMScript records match what the installed TVM prints."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from conftest import ROOT

tvm = pytest.importorskip("tvm")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import tvm_matmul as tm  # noqa: E402

RECORDS = ROOT / "code" / "compiler" / "records"
TOL = dict(rtol=1e-4, atol=1e-3)  # float32 sums of 64-256 products in a different order than float64 NumPy


def body(name):
    return "\n".join(l for l in (RECORDS / name).read_text().splitlines()[3:])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 128), dtype=np.float32)
    b = rng.standard_normal((128, 96), dtype=np.float32)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def test_every_schedule_step_equals_numpy(data):
    a, b, ref = data
    steps = tm.schedule_steps(tm.matmul_module(64, 96, 128), ti=16, tj=32, tk=4)
    assert [n for n, _ in steps] == ["naive", "tile", "reorder", "vectorize", "parallel"]
    for _, mod in steps:
        out, _ = tm.run(tm.build(mod), a, b, repeat=1)
        np.testing.assert_allclose(out, ref, **TOL)
    script = steps[-1][1].script()
    assert "T.parallel(4)" in script and "T.vectorized(32)" in script


def test_sampled_space_and_search(data):
    a, b, ref = data
    mod = tm.matmul_module(64, 96, 128)
    for seed in range(1, 8):
        ti, tj, tk = tm.decisions(tm.sampled_schedule(mod, seed=seed))
        assert 64 % ti == 0 and 96 % tj == 0 and 128 % tk == 0 and tk <= 16

    def measure(ti, tj, tk):
        out, sec = tm.run(tm.build(tm.fixed_schedule(mod, ti, tj, tk)), a, b, repeat=1)
        np.testing.assert_allclose(out, ref, **TOL)
        return sec

    best, seen = tm.evolutionary_search(mod, (64, 96, 128), measure, trials=6)
    assert len(seen) == 6 and seen[best] == min(seen.values())


def test_records_are_what_this_tvm_prints():
    assert (RECORDS / "tvm-matmul-naive.txt").read_text().startswith(f"# tool: apache-tvm {tvm.__version__}")
    steps = dict(tm.schedule_steps(tm.matmul_module(256, 256, 256)))
    assert body("tvm-matmul-naive.txt").strip() == steps["naive"].script().strip()
    assert body("tvm-matmul-scheduled.txt").strip() == steps["parallel"].script().strip()
    assert body("tvm-matmul-trace.txt").strip() == str(tm.sampled_schedule(tm.matmul_module(256, 256, 256), seed=1).trace).strip()


def test_relax_flow_fuses_matmul_bias_relu_and_matches_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
    x = torch.randn(4, 16)
    stages, out = tm.relax_flow(model, x)
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert body("tvm-relax-fused.txt").strip() == stages["fused"].strip()
    assert body("tvm-relax-imported.txt").strip() == stages["imported"].strip()
    assert "fused_matmul_add_relu" in stages["fused"]
