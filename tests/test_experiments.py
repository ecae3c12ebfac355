"""The GPU experiments (bench/experiments) and their committed records (data/records)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from bench.experiments import RECORDS, ROOT, load, names

EXPERIMENTS = names()


def test_runner_lists_every_experiment_and_refuses_without_gpu():
    listed = subprocess.run([sys.executable, "-m", "bench.experiments", "--list"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert [line.split(" - ")[0] for line in listed.stdout.splitlines()] == EXPERIMENTS
    bad = subprocess.run([sys.executable, "-m", "bench.experiments", "no-such-experiment"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown experiments" in bad.stderr


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_has_a_record_with_provenance(name):
    module = importlib.import_module(f"bench.experiments.{name}")
    assert module.TITLE and callable(module.run)
    record = load(name)
    assert record["experiment"] == name and record["title"] == module.TITLE
    assert record["results"], f"{name}: empty results"
    prov = record["provenance"]
    for key in ("gpu", "driver", "cuda_runtime", "packages", "date", "commit"):
        assert prov.get(key), f"{name}: provenance lacks {key}"
    assert "H200" in prov["gpu"]
    for used in module.USED_BY:
        path = ROOT / used
        assert path.is_file(), f"{name}: USED_BY names {used}, which does not exist"
        assert name in path.read_text(encoding="utf-8"), f"{used} does not read the record {name}"


MULTI_GPU = {"collectives", "scaling"}  # python -m bench.collectives / bench.scaling, in data/records/<gpu>-x<N>/


def test_every_record_belongs_to_an_experiment():
    for path in RECORDS.glob("*/*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        if path.parent.name.startswith("cpu-"):
            # CPU measurements of the foundations chapters: made by a runner under code/, which the
            # record's command names, on the machine the folder is named after.
            prov = record["provenance"]
            assert prov["machine"] == path.parent.name, f"{path.relative_to(ROOT)}: provenance names {prov['machine']!r}"
            runner = next((w for w in prov["command"].split() if w.startswith("code/")), None)
            assert runner and (ROOT / runner).is_file(), (
                f"{path.relative_to(ROOT)}: its command {prov['command']!r} names no runner under code/ that exists")
            assert prov.get("cpu") and prov.get("date") and prov.get("commit"), f"{path.relative_to(ROOT)}: incomplete provenance"
            continue
        if path.parent.name.rsplit("-x", 1)[-1].isdigit():
            assert path.stem in MULTI_GPU, f"{path.relative_to(ROOT)}: not a record of bench.collectives or bench.scaling"
            continue
        assert path.stem in EXPERIMENTS, f"{path.relative_to(ROOT)}: no bench/experiments/{path.stem}.py made it"
        assert record["schema"] == 1


def test_listing_taken_from_a_record_is_verbatim():
    """code/compiler/records/inductor-triton-kernel.txt is the kernel source stored in the H200 record."""
    record = load("inductor_kernels")
    first = next(c for c in record["results"]["cases"] if c.get("first_kernel_source"))
    listing = (ROOT / "code" / "compiler" / "records" / "inductor-triton-kernel.txt").read_text(encoding="utf-8")
    header, body = listing.split("\n", 3)[:3], listing.split("\n", 3)[3]
    assert [h.split(":")[0] for h in header] == ["# tool", "# machine", "# produced"]
    assert body == first["first_kernel_source"].rstrip() + "\n"
