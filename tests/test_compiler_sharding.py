"""code/compiler/sharding_demo.py: a matmul sharded over 8 CPU devices in the classic ways; the collectives the SPMD
partitioner inserted (kind, per-device shape, replica groups) read from the compiled HLO; Shardy's propagation of an
unannotated intermediate; shard_map with explicit psum / psum_scatter against the automatic version; every result
against NumPy; the committed records (code/compiler/records/sharding-*.txt) against what the installed jax prints.

XLA reads --xla_force_host_platform_device_count when its CPU backend starts, so everything runs in one fresh
subprocess (this pytest process may already have imported jax with one device) and reports JSON."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("jax")
RECORDS = ROOT / "code" / "compiler" / "records"

SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import sharding_demo as S   # sets XLA_FLAGS before it imports jax
import jax, jaxlib
import numpy as np

out = {"devices": jax.device_count(), "jax": jax.__version__, "jaxlib": jaxlib.__version__}
rows = S.run_cases()
out["summary"] = S.summary(rows)
out["cases"] = {r["case"]: {k: v for k, v in r.items() if k != "hlo"} for r in rows}
x, w = S.operands()
out["scale"] = float(np.abs(x @ w).max())
ref = x @ w
exp = S.explicit_versions(x, w)
out["explicit"] = {k: {"collectives": S.collectives(h), "max_abs_err": float(np.abs(np.asarray(f(x, w)) - ref).max())}
                   for k, (f, h) in exp.items()}
out["explicit_entries"] = {k: S.entry(h) for k, (f, h) in exp.items()}
row = next(r for r in rows if r["case"] == "row-parallel, output sharded")
out["row_entry"] = S.entry(row["hlo"])
auto, forced = S.propagate(S.megatron_mlp), S.propagate(S.megatron_mlp_forced)
out["propagation"] = {
    name: {"collectives": S.collectives(p["hlo"]), "out_spec": str(p["out_sharding"].spec),
           "max_abs_err": p["max_abs_err"], "scale": p["scale"], "entry": S.entry(p["hlo"])}
    for name, p in [("auto", auto), ("forced", forced)]}
out["before"] = S.shardings_in(S.shardy_dump("before_propagation"))
out["after"] = S.shardings_in(S.shardy_dump())
out["after_text"] = S.strip_mlir(S.shardy_dump())
out["groups"] = {
    "explicit": S.expand_groups("{{0,1,2,3},{4,5,6,7}}"),
    "iota": S.expand_groups("[2,4]<=[8]"),
    "iota_t": S.expand_groups("[4,2]<=[2,4]T(1,0)"),
    "mesh_inner": S.expand_groups("mesh['axis_0'=2,'axis_1'=4] {'axis_1'}"),
    "mesh_outer": S.expand_groups("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}"),
}
out["explicit_mode_error"] = S.explicit_mode_error(x, w)
out["ring_mlp"] = {name: sum(S.ring_bytes(k, shp, len(g[0])) for k, shp, g in S.collectives(p["hlo"]))
                   for name, p in [("auto", auto), ("forced", forced)]}
out["ring"] = [S.ring_bytes("all-reduce", "f32[16,64]", 8), S.ring_bytes("reduce-scatter", "f32[2,64]", 8)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def result():
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "code" / "compiler")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def body(name):
    return "\n".join((RECORDS / name).read_text(encoding="utf-8").splitlines()[3:])


ALL = [list(range(8))]
EXPECTED = {  # case: [(collective, per-device result shape, replica groups)]
    "data-parallel": [],
    "row-parallel, output replicated": [("all-reduce", "f32[16,64]{1,0}", ALL)],
    "row-parallel, output sharded": [("all-reduce", "f32[16,64]{1,0}", ALL)],
    "column-parallel, output sharded": [],
    "column-parallel, output replicated": [("all-gather", "f32[16,64]{0,1}", ALL)],
    "2-D, K over model": [("all-reduce", "f32[8,64]{1,0}", [[0, 1, 2, 3], [4, 5, 6, 7]])],
    "2-D, K over data": [("all-reduce", "f32[4,64]{1,0}", [[0, 4], [1, 5], [2, 6], [3, 7]])],
    "2-D, no contraction split": [],
}


def test_eight_devices_and_every_sharding_equals_numpy(result):
    assert result["devices"] == 8
    assert set(result["cases"]) == set(EXPECTED)
    for name, case in result["cases"].items():
        # float32, K = 32 products summed in another order per sharding: a few ulps of the largest output
        assert case["max_abs_err"] <= 1e-6 * result["scale"] * 32, (name, case["max_abs_err"])


def test_partitioner_inserts_the_expected_collectives(result):
    for name, expected in EXPECTED.items():
        got = [tuple(c) for c in result["cases"][name]["collectives"]]
        assert got == [tuple(e) for e in expected], (name, got)
    # the row-parallel matmul with a row-sharded output: all-reduce, then each device slices its rows. XLA's GPU
    # pipeline rewrites that pair into one reduce-scatter (ReduceScatterCreator); the CPU pipeline keeps the pair
    assert result["cases"]["row-parallel, output sharded"]["dynamic_slice"]
    assert "reduce-scatter" not in result["row_entry"] and "all-reduce(" in result["row_entry"]


def test_per_device_shapes_are_the_global_shapes_divided_by_the_mesh(result):
    c = result["cases"]
    assert (c["data-parallel"]["local_x"], c["data-parallel"]["local_w"], c["data-parallel"]["local_out"]) == ("f32[2,32]", "f32[32,64]", "f32[2,64]")
    assert (c["row-parallel, output sharded"]["local_x"], c["row-parallel, output sharded"]["local_w"]) == ("f32[16,4]", "f32[4,64]")
    assert c["row-parallel, output sharded"]["local_out"] == "f32[2,64]"
    assert c["column-parallel, output sharded"]["local_w"] == "f32[32,8]" and c["column-parallel, output sharded"]["local_out"] == "f32[16,8]"
    assert (c["2-D, K over model"]["local_x"], c["2-D, K over model"]["local_out"]) == ("f32[8,8]", "f32[8,64]")
    assert c["2-D, no contraction split"]["local_out"] == "f32[8,16]"


def test_replica_group_formats_expand_alike(result):
    g = result["groups"]
    assert g["explicit"] == g["iota"] == g["mesh_inner"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert g["iota_t"] == g["mesh_outer"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_shard_map_psum_is_the_automatic_all_reduce_and_psum_scatter_halves_the_bytes(result):
    ex = result["explicit"]
    auto = result["cases"]["row-parallel, output replicated"]["collectives"]
    assert ex["psum"]["collectives"] == auto
    assert ex["psum_scatter"]["collectives"] == [["reduce-scatter", "f32[2,64]{1,0}", ALL]]
    for v in ex.values():
        assert v["max_abs_err"] <= 1e-6 * result["scale"] * 32
    ar, rs = result["ring"]  # bytes each device sends on a ring of 8
    assert (ar, rs) == (7168, 3584) and ar == 2 * rs


def test_shardy_propagates_the_column_sharding_to_the_unannotated_intermediate(result):
    assert result["before"] == []  # only the arguments carry shardings before propagation
    assert result["after"] == [["dot", '[{}, {"x"}]'], ["broadcast_in_dim", '[{}, {"x"}]'], ["maximum", '[{}, {"x"}]']]
    assert "reduction={k}" in result["after_text"]
    auto, forced = result["propagation"]["auto"], result["propagation"]["forced"]
    assert auto["collectives"] == [["all-reduce", "f32[16,32]{1,0}", ALL]] and auto["out_spec"] == "P()"
    # forcing h to be split by rows: the compiler gathers both weights (8 KiB each) instead, and the output stays split
    assert [c[:2] for c in forced["collectives"]] == [["all-gather", "f32[64,32]{1,0}"], ["all-gather", "f32[32,64]{0,1}"]]
    assert forced["out_spec"] == "P('x',)"
    # bytes each device sends on a ring: one all-reduce of 16x32 floats against two all-gathers of 64x32 floats
    assert result["ring_mlp"] == {"auto": 2 * 7 * 2048 // 8, "forced": 2 * 7 * 8192 // 8}
    assert result["ring_mlp"]["forced"] == 4 * result["ring_mlp"]["auto"]
    for p in (auto, forced):
        assert p["max_abs_err"] <= 1e-6 * p["scale"] * 64


def test_explicit_mode_refuses_an_ambiguous_contraction(result):
    kind, text = result["explicit_mode_error"]
    assert kind == "ShardingTypeError" and "Contracting dimensions are sharded" in text


def test_records_are_what_this_jax_prints(result):
    for name in ["sharding-cases.txt", "sharding-row-parallel.txt", "sharding-shard-map.txt", "sharding-propagation.txt"]:
        head = (RECORDS / name).read_text(encoding="utf-8").splitlines()[:3]
        assert head[0].startswith(f"# tool: jax {result['jax']}, jaxlib {result['jaxlib']}, XLA CPU backend"), name
        assert head[2].endswith("by `python code/compiler/sharding_demo.py records`")
    assert body("sharding-cases.txt").strip() == result["summary"].strip()
    assert body("sharding-row-parallel.txt").strip() == result["row_entry"].strip()
    shard_map = body("sharding-shard-map.txt")
    assert result["explicit_entries"]["psum"] in shard_map and result["explicit_entries"]["psum_scatter"] in shard_map
    prop = body("sharding-propagation.txt")
    assert result["after_text"].strip() in prop
    for p in result["propagation"].values():
        assert p["entry"] in prop
