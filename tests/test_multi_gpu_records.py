"""The committed multi-GPU records (data/records/<gpu>-x<N>/collectives.json and scaling.json, made by
bench/collectives.py and bench/scaling.py on GPUs) and the pages that quote them: provenance complete,
busbw = algbw x the nccl-tests factor on every row, every operation's correctness check passed, the
scaling runs' gradient checks passed, and every number a page quotes equals the record (rounded as printed)."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import ROOT

from bench import collectives as bc

RECORDS = ROOT / "data" / "records"
COLL = sorted(RECORDS.glob("*-x[0-9]*/collectives.json"))
SCAL = sorted(RECORDS.glob("*-x[0-9]*/scaling.json"))
# nccl-tests src/*.cu *GetBw, written out here independently of the code under test
FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
PAGES = {
    "collectives": ROOT / "docs" / "runtime" / "collectives.md",
    "dp": ROOT / "docs" / "framework" / "data-parallel.md",
    "fsdp": ROOT / "docs" / "framework" / "zero-fsdp.md",
    "tp": ROOT / "docs" / "framework" / "tensor-parallel.md",
}
LAB = ROOT / "notebooks" / "runtime" / "collectives-cost-lab.ipynb"
MARGIN = 1.02  # timing noise only: the busbw of a row cannot really exceed the link


def _load(path):
    return json.loads(path.read_text(encoding="utf-8"))


def _ceiling_gbps(slug: str) -> float:
    gpus = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]
    return gpus[slug.rsplit("-x", 1)[0]]["nvlink_bandwidth_gbps"] / 2


def test_records_exist():
    assert COLL and SCAL, "no multi-GPU record committed"
    assert any(_load(p)["n_ranks"] >= 2 for p in COLL)


@pytest.mark.parametrize("path", COLL + SCAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_provenance(path):
    rec = _load(path)
    prov = rec["provenance"]
    assert "H200" in prov["gpu"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", prov["nccl"])
    assert prov["driver"] and prov["date"] and prov["commit"] and prov["packages"]["torch"]
    assert prov["command"].startswith(f"python -m bench.{rec['experiment']}")
    assert prov["environment"]["NCCL_NVLS_ENABLE"] == "0"
    assert prov["environment"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    topo = prov["topology"]
    assert "GPU0" in topo and "Legend" in topo
    if rec["n_ranks"] >= 2:
        assert re.search(r"GPU0\s+X\s+NV\d+", topo), "the two GPUs are not NVLink-connected in the record"


@pytest.mark.parametrize("path", COLL, ids=lambda p: p.parent.name)
def test_collectives_rows(path):
    rec = _load(path)
    n = rec["n_ranks"]
    ceiling = _ceiling_gbps(rec["gpu_slug"])
    timed = 0
    for run in rec["runs"]:
        for r in run["results"]:
            assert r["check"]["ran"] and r["check"]["wrong_elements"] == 0, (run["algo"], run["proto"], r["op"], r["size"])
            assert "time_us" in r  # a row with a check and no time would be a failed check
            f = FACTOR[r["op"]](n)
            assert r["busbw_factor"] == pytest.approx(f, abs=1e-12)
            assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e3), rel=1e-9)
            assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * f, rel=1e-9, abs=1e-12)
            assert r["time_us_max"] >= r["time_us"] * (1 - 1e-9)
            if n >= 2:
                assert r["busbw_gbps"] <= ceiling * MARGIN
            timed += 1
        assert not run["errors"] or run["algo"] == "Tree"
    assert timed > 0
    default = [run for run in rec["runs"] if run["algo"] is None]
    assert len(default) == 1 and default[0]["status"] == "ok"
    for op in bc.OPS:  # NCCL's own choice measured every op up to 4 GiB
        assert max(r["size"] for r in default[0]["results"] if r["op"] == op) == 4 * 2**30


def test_tree_refusal_recorded():
    rec = _load(RECORDS / "nvidia-h200-x2" / "collectives.json")
    tree = [run for run in rec["runs"] if run["algo"] == "Tree"]
    assert {run["proto"] for run in tree} == {"Simple", "LL", "LL128"}
    for run in tree:
        assert not run["results"]
        failed = {x["op"] for key in ("not_available", "errors", "failed_ops") for x in run[key]}
        assert failed == set(bc.OPS)
        reasons = [x["reason"] for x in run["errors"] + run["failed_ops"]]
        assert any("AllGather with datatype ncclInt8. NCCL_ALGO was set to Tree" in x for x in reasons)


@pytest.mark.parametrize("path", SCAL, ids=lambda p: p.parent.name)
def test_scaling_record(path):
    rec = _load(path)
    assert rec["checks"], "no gradient check recorded"
    for c in rec["checks"]:
        assert c["ok"] and c["max_rel_grad_diff"] <= c["tolerance"] <= 1e-4
    assert {c["mode"] for c in rec["checks"]} == {"ddp", "fsdp", "tp"}
    base = rec["baseline"]
    assert base["mode"] == "plain" and base["n"] == 1
    for r in rec["results"]:
        assert r["status"] == "ok"
        assert r["tokens_per_s"] == pytest.approx(r["tokens_per_step"] / r["step_s"], rel=1e-9)
        assert r["step_s"] == max(r["step_s_ranks"])
        speed = r["tokens_per_s"] / base["tokens_per_s"]
        eff = speed / r["n"]  # DDP/FSDP: n x tokens at n x the work; TP: one batch, so the same formula
        assert r["scaling_efficiency"] == pytest.approx(eff, rel=1e-9)
        if "step_no_sync_s" in r:
            assert r["exposed_comm_share"] == pytest.approx(max(0.0, r["step_s"] - r["step_no_sync_s"]) / r["step_s"])
    if rec["n_ranks"] == 2:
        assert {r["mode"] for r in rec["results"]} == {"ddp", "fsdp", "tp"}


# ------------------------------------------------------------------ pages and lab quote the records
def _fmt(x: float) -> str:
    return f"{x:.1f}" if x >= 1 else f"{x:.4f}"


def test_pages_reference_records_and_say_what_was_not_lent():
    for name, page in PAGES.items():
        text = page.read_text(encoding="utf-8")
        assert "data/records/nvidia-h200-x1/" in text and "nvidia-h200-x2/" in text and "nvidia-h200-x4/" in text, name
        assert "8 卡没有测" in text, name
    lab = "".join("".join(c["source"]) for c in _load(LAB)["cells"])
    assert 'data/records/nvidia-h200-x{n}/collectives.json' in lab and "(1, 2, 4)" in lab
    assert "8 卡没有测" in lab


def test_collectives_page_tables_equal_record():
    rec = _load(RECORDS / "nvidia-h200-x2" / "collectives.json")
    text = PAGES["collectives"].read_text(encoding="utf-8")
    section = text.split("## H200 实测：两卡 NVLink 上的集合通信", 1)[1].split("\n## ", 1)[0].split("\n### 四卡", 1)[0]
    default = next(run for run in rec["runs"] if run["algo"] is None)
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    header = rows[0].split("|")[2:-1]
    sizes = [bc.parse_bytes(h.replace(" ", "")) for h in header]
    measured = 0
    for line in rows[1:]:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if cells[0] not in bc.OPS or len(cells) != len(sizes) + 1:
            continue
        for size, cell in zip(sizes, cells[1:]):
            got = [r for r in default["results"] if r["op"] == cells[0] and r["size"] == size]
            if not got:
                assert cell == "—"
                continue
            r = got[0]
            assert cell == f"{r['time_us']:.1f} / {_fmt(r['algbw_gbps'])} / {_fmt(r['busbw_gbps'])}", (cells[0], size)
            measured += 1
    assert measured >= 25
    fit_rows = {(r["op"], f"{r['algo']}/{r['proto']}"): r for r in bc.fit([rec])}
    fitted = 0
    for line in rows:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if (cells[0], cells[1] if len(cells) > 1 else "") not in fit_rows:
            continue
        r = fit_rows[(cells[0], cells[1])]
        big = max(abs(x["pct"]) for x in r["residuals_pct"] if x["bytes"] >= 64 * 2**20)
        step = f"{r['alpha_step_us']:.2f}" if "alpha_step_us" in r else "—"
        assert cells[2:] == [f"{r['alpha_us']:.2f}", step, f"{r['model_busbw_gbps']:.1f}",
                             f"{100 * r['busbw_over_ceiling']:.1f}%", f"{r['max_abs_residual_pct']:.1f}%", f"{big:.1f}%"]
        fitted += 1
    assert fitted == 20  # 5 ops x (NCCL's choice + Ring x 3 protocols)
    for label, (proto, op, size) in {"8664.8": ("LL", "all_reduce", 2**30), "3274.8": ("Simple", "all_reduce", 2**30),
                                     "3408.0": ("LL128", "all_reduce", 2**30), "5458.7": ("LL", "all_gather", 2**30),
                                     "1965.0": ("Simple", "all_gather", 2**30), "1618.9": ("Simple", "all_to_all", 2**30),
                                     "1620.4": ("LL", "all_to_all", 2**30), "1615.3": ("LL128", "all_to_all", 2**30),
                                     "250.9": ("Simple", "all_reduce", 2**26)}.items():
        run = next(x for x in rec["runs"] if x["algo"] == "Ring" and x["proto"] == proto)
        t = next(r["time_us"] for r in run["results"] if r["op"] == op and r["size"] == size)
        assert f"{t:.1f}" == label and label in section


def test_framework_pages_quote_scaling_record():
    """The DDP, FSDP2 and TP pages state the 1/2/4-GPU run through record tokens: once expanded, every step time,
    tokens/s, efficiency and peak memory of the records is on the page, and the profiler's share is quoted only
    to say why it is not used (it exceeds 1 somewhere)."""
    from tools import measured

    recs = {n: _load(RECORDS / f"nvidia-h200-x{n}" / "scaling.json") for n in (2, 4)}
    base = recs[4]["baseline"]
    assert base == recs[2]["baseline"]  # one run measured 1, 2 and 4 GPUs: the same single-GPU baseline

    def quoted(r):
        return [f"{r['step_s'] * 1e3:.2f} ms", f"{r['tokens_per_s']:,.0f}", f"{r['max_memory_bytes'] / 1e9:.2f} GB"]

    for key, modes in {"dp": ["ddp"], "fsdp": ["ddp", "fsdp"], "tp": ["tp"]}.items():
        raw = PAGES[key].read_text(encoding="utf-8")
        text = measured.expand(raw, PAGES[key].name)
        assert "python -m bench.scaling --gpus 1,2,4" in raw
        for n, rec in recs.items():
            by = {r["mode"]: r for r in rec["results"]}
            for s in quoted(base) + [x for m in modes for x in quoted(by[m])]:
                assert s in text, (key, n, s)
            for m in modes:
                assert f"{100 * by[m]['scaling_efficiency']:.1f}%" in text, (key, n, m)
        if key == "dp":
            for rec in recs.values():
                ddp = next(r for r in rec["results"] if r["mode"] == "ddp")
                assert f"{ddp['step_no_sync_s'] * 1e3:.2f} ms" in text
                assert f"{100 * ddp['exposed_comm_share']:.1f}%" in text
        else:
            shares = [next(r for r in rec["results"] if r["mode"] == key)["comm_share"] for rec in recs.values()]
            assert all(f"{c:.2f}" in text for c in shares) and max(shares) > 1