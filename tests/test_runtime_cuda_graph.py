"""code/runtime/cuda_graph.py: launch-time model, line fit, vLLM capture sizes and padding.

When the H200 record of bench/experiments/cuda_graph_launch.py exists, also checks what physics
guarantees of it: replay is cheaper per kernel than eager launches for long chains."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "runtime"))
import cuda_graph as cg  # noqa: E402

RECORD = ROOT / "data" / "records" / "nvidia-h200" / "cuda_graph_launch.json"


def test_launch_model_limits():
    # launch-bound: host 5 us per launch, kernel 2 us -> eager costs 5 us per kernel
    m = cg.launch_time_model(1000, c_us=5.0, t_us=2.0, g_us=10.0, d_us=0.5)
    assert m["launch_bound"] and m["eager_us"] == pytest.approx(5000.0)
    assert m["graph_us"] == pytest.approx(10.0 + 1000 * 2.5)
    assert m["graph_per_kernel_us"] < m["eager_per_kernel_us"]
    # GPU-bound: kernels of 50 us hide the launch cost; the graph saves almost nothing
    m = cg.launch_time_model(1000, c_us=5.0, t_us=50.0, g_us=10.0, d_us=0.5)
    assert not m["launch_bound"] and m["eager_us"] == pytest.approx(5.0 + 50_000.0)
    assert m["graph_us"] / m["eager_us"] == pytest.approx(1.01, abs=0.002)
    # one kernel: a graph launch is no cheaper than a kernel launch
    m = cg.launch_time_model(1, c_us=5.0, t_us=2.0, g_us=10.0, d_us=0.5)
    assert m["graph_us"] > m["eager_us"]


def test_fit_line_recovers_a_known_line():
    xs = [1, 2, 4, 8, 16, 32]
    a, b = cg.fit_line(xs, [7.0 + 2.5 * x for x in xs])
    assert a == pytest.approx(7.0) and b == pytest.approx(2.5)
    with pytest.raises(ValueError):
        cg.fit_line([1], [2])


def test_vllm_capture_sizes_and_padding():
    assert cg.default_max_capture_size(128) == 256 and cg.default_max_capture_size(1024) == 512
    sizes = cg.vllm_capture_sizes(512)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 512
    assert len(sizes) == 3 + 31 + 17           # [1,2,4] + 8..248 step 8 + 256..512 step 16
    assert len(cg.vllm_capture_sizes(256)) == 3 + 31 + 1
    assert [cg.pad_to_capture_size(b, sizes) for b in (1, 3, 5, 9, 255, 257, 512)] == [1, 4, 8, 16, 256, 272, 512]
    assert cg.pad_to_capture_size(513, sizes) is None
    waste = cg.padding_waste(sizes)
    assert 0 < waste < 0.05                    # buckets of 8 and 16: a few percent of padded rows


@pytest.mark.skipif(not RECORD.exists(), reason="no H200 record of cuda_graph_launch yet")
def test_h200_record_replay_cheaper_per_kernel():
    rows = json.loads(RECORD.read_text(encoding="utf-8"))["results"]["rows"]
    long = [r for r in rows if r["kernels"] >= 64]
    assert long
    for r in long:
        assert r["replay_wall_per_kernel_us"]["median"] < r["eager_wall_per_kernel_us"]["median"]
