"""GPU benchmark records: schema, provenance, completeness; and the CLI on a machine without a GPU."""
from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
import yaml

from conftest import ROOT
from tools import labs

SCHEMA = json.loads((ROOT / "data" / "schemas" / "bench-record.json").read_text(encoding="utf-8"))
RECORDS = sorted((ROOT / "data" / "bench").rglob("*.json"))
GPUS = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]


def test_there_are_records():
    assert RECORDS, "no benchmark records under data/bench/"


@pytest.mark.parametrize("path", RECORDS, ids=[p.relative_to(ROOT).as_posix() for p in RECORDS])
def test_record_matches_schema_and_its_gpu(path):
    record = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(record)
    gpu = GPUS[path.parent.name]
    assert record["provenance"]["gpu"] == gpu["device_name"]
    assert record["provenance"]["sm_count"] == gpu["sm_count"]
    for r in record["results"]:  # the derived figures agree with the raw ones
        assert r["gbps"] == pytest.approx(r["bytes"] / r["time_ms"] / 1e6, rel=1e-9)
        assert r["tflops"] == pytest.approx(r["flops"] / r["time_ms"] / 1e9, rel=1e-9)
        assert r["gbps"] < 1.2 * gpu["memory_bandwidth_gbps"], "faster than the memory can deliver: timing bug?"


def test_every_lab_with_a_bench_cell_has_every_rung_at_every_size_on_each_gpu():
    for gpu_dir in sorted(p for p in (ROOT / "data" / "bench").iterdir() if p.is_dir()):
        assert (gpu_dir / "copy.json").is_file(), f"{gpu_dir} lacks the copy-bandwidth ceiling"
        for nb in labs.iter_notebooks():
            cells = labs.load(nb)["cells"]
            bench = [labs._source(c) for c in cells if "bench" in c.get("metadata", {}).get("tags", [])]
            if not bench:
                continue
            ns: dict = {}
            exec(bench[0].split("\n\ndef ")[0], ns)  # the constants at the top of the bench cell
            slug = labs.rel(nb).removeprefix("notebooks/").removesuffix(".ipynb")
            record = json.loads((gpu_dir / f"{slug.replace('/', '-')}.json").read_text(encoding="utf-8"))
            have = {(r["rung"], r["n"]) for r in record["results"]}
            # a rung that could not run there is listed with its reason (python -m bench), never silently missing
            have |= {(m["rung"], m["n"]) for m in record.get("not_measured", [])}
            want = {(rung, n) for rung in ns["RUNGS"] for n in ns["BENCH_SIZES"]}
            assert want <= have, f"{gpu_dir.name}/{slug}: missing {sorted(want - have)[:5]}"


@pytest.mark.parametrize("module,says", [("bench", "Nothing was measured"), ("bench.gpu_check", "nothing was run")])
def test_gpu_commands_say_they_need_a_gpu_on_a_cpu_machine(module, says, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; `make bench` and `make gpu-check` measure instead")
    out = subprocess.run([sys.executable, "-m", module, "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2
    assert "needs an NVIDIA GPU" in out.stdout and says in out.stdout
    assert not any(tmp_path.iterdir()), "wrote output although nothing ran"


def test_readme_gpu_check_counts_match_the_record():
    """The 'N 项通过' of the H200 gpu-check (moved from the README to docs/resources/gpu-records.md, where
    it is written with {{record}} tokens) renders as the committed record's count, not a hand-kept number."""
    import re

    from tools import measured

    record = json.loads((ROOT / "data" / "gpu-check" / "nvidia-h200.json").read_text(encoding="utf-8"))
    results = record["results"]
    page = "docs/resources/gpu-records.md"
    readme = measured.expand((ROOT / page).read_text(encoding="utf-8"), page)
    m = re.search(r"共 (\d+) 项，(\d+) 项通过（`data/gpu-check/nvidia-h200.json`", readme)
    assert m, f"{page} no longer states the gpu-check count next to its record"
    assert (int(m[1]), int(m[2])) == (len(results), sum(r["ok"] for r in results))
    assert all(r.get("commit") for r in results), "every item of a merged record names the commit it ran at"


def test_labs_missing_from_the_gpu_check_are_named_on_the_page():
    """Every lab that the committed H200 gpu-check has not run is named where the record is described."""
    record = json.loads((ROOT / "data" / "gpu-check" / "nvidia-h200.json").read_text(encoding="utf-8"))
    ran = {r["item"] for r in record["results"]}
    page = (ROOT / "docs" / "resources" / "gpu-records.md").read_text(encoding="utf-8")
    missing = [labs.rel(p) for p in labs.iter_notebooks() if labs.rel(p) not in ran]
    unnamed = [m for m in missing if f"`{m.rsplit('/', 1)[1].removesuffix('.ipynb')}`" not in page]
    assert not unnamed, f"docs/resources/gpu-records.md does not say these labs have not run on the GPU: {unnamed}"
