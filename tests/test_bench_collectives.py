"""bench/collectives.py and bench/scaling.py on CPU gloo ranks: the record's structure, every operation's
correctness check, busbw = algbw x the nccl-tests factor, the alpha-beta fit on synthetic data, and DDP's
gradients against a single-process run. Timings here are CPU timings and are only checked for consistency."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "runtime"))
from bench import collectives as bc  # noqa: E402
from collectives import BUSBW_FACTOR  # noqa: E402  (code/runtime/collectives.py)

FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,  # nccl-tests src/*.cu *GetBw
          "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _check_record(rec: dict, n: int) -> None:
    assert rec["experiment"] == "collectives" and rec["backend"] == "gloo" and rec["n_ranks"] == n
    assert rec["provenance"]["command"].startswith("python -m bench.collectives")
    assert rec["provenance"]["environment"]["NCCL_NVLS_ENABLE"] == "0"
    assert rec["provenance"]["environment"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert rec["sizes_requested"] == [2**k for k in range(3, 17)]  # 8 B .. 64 KiB
    for run in rec["runs"]:
        assert run["status"] == "ok" and not run["errors"] and not run["not_available"]
        assert run["env"]["NCCL_NVLS_ENABLE"] == "0"
        for op in rec["ops"]:
            rows = [r for r in run["results"] if r["op"] == op]
            skipped = {s["size"] for s in run["skipped"] if s["op"] == op}
            # every requested size is either measured or skipped with a reason (< 16 B per rank)
            assert {r["size"] for r in rows} | skipped == set(rec["sizes_requested"])
            assert all(bc.geometry(op, s, n)[2] == 0 or bc.geometry(op, s, n)[0] == 0 for s in skipped)
            assert rows, op
            for r in rows:
                assert r["check"] == {"ran": True, "wrong_elements": 0}
                assert r["bytes"] == bc.geometry(op, r["size"], n)[2]
                assert r["busbw_factor"] == pytest.approx(FACTOR[op](n), rel=1e-12)
                assert r["busbw_factor"] == pytest.approx(BUSBW_FACTOR[bc.MODEL_NAME[op]](n), rel=1e-12)
                assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9, rel=1e-9)
                assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * FACTOR[op](n), rel=1e-9)
                assert len(r["time_us_ranks"]) == n
                assert r["time_us"] == pytest.approx(sum(r["time_us_ranks"]) / n, rel=1e-9)  # nccl-tests -a 1
                assert r["time_us_max"] == pytest.approx(max(r["time_us_ranks"]), rel=1e-9)


def test_geometry_follows_nccl_tests():
    # all-gather on 8 ranks, 1 MiB requested: per-rank count (262144 / 8) rounded to 4 floats, S = whole buffer
    assert bc.geometry("all_gather", 2**20, 8) == (32768, 262144, 2**20)
    assert bc.geometry("reduce_scatter", 2**20, 3) == (87380 * 3, 87380, 87380 * 3 * 4)
    assert bc.geometry("all_to_all", 96, 3) == (24, 24, 96)
    assert bc.geometry("all_gather", 32, 3)[2] == 0  # 2 floats per rank round down to 0
    assert bc.geometry("all_reduce", 8, 8) == (2, 2, 8)
    assert bc.sizes(8, 64 * 2**10)[0] == 8 and bc.sizes(8, 64 * 2**10)[-1] == 65536
    assert bc.parse_bytes("4G") == 4 * 2**30 and bc.parse_bytes("64KiB") == 65536


@pytest.mark.parametrize("n,extra", [(2, ["--algos", "Ring", "--protos", "Simple"]), (3, [])])
def test_cpu_sweep_checks_and_bandwidths(n, extra, tmp_path):
    out = _run(["bench.collectives", "--cpu", str(n), "--min-bytes", "8", "--max-bytes", "64K",
                "--iters", "2", "--warmup", "1", "--out", str(tmp_path), *extra], timeout=120)
    rec = json.loads((tmp_path / f"cpu-gloo-x{n}" / "collectives.json").read_text())
    _check_record(rec, n)
    assert [(r["algo"], r["proto"]) for r in rec["runs"]] == [(None, None)] + ([("Ring", "Simple")] if extra else [])
    if extra:  # a forced combination runs in fresh processes with NCCL_ALGO/NCCL_PROTO exported to them
        assert rec["runs"][1]["env"]["NCCL_ALGO"] == "Ring" and rec["runs"][1]["env"]["NCCL_PROTO"] == "Simple"
    assert "alpha us" in out.stdout  # the fit table is printed after the sweep
    assert not (ROOT / "data" / "records" / f"cpu-gloo-x{n}").exists()


def test_refused_op_is_not_available_a_crashed_op_failed_and_the_others_run():
    cfg = {"backend": "gloo", "ops": ["all_gather", "all_reduce", "reduce_scatter", "broadcast"], "sizes": [64, 128],
           "iters": 1, "warmup": 0, "inject_refusal": ["all_gather"], "inject_crash": ["reduce_scatter"]}
    (run,) = bc.measure(2, "gloo", cfg, [("Tree", "LL")], timeout=60, log=lambda m: None)
    assert run["status"] == "partial" and run["env"]["NCCL_ALGO"] == "Tree" and run["env"]["NCCL_PROTO"] == "LL"
    assert [x["op"] for x in run["not_available"]] == ["all_gather"]
    assert "injected refusal" in run["not_available"][0]["reason"]
    assert [x["op"] for x in run["failed_ops"]] == ["reduce_scatter"]  # the processes died in it: fresh ones went on
    assert {r["op"] for r in run["results"]} == {"all_reduce", "broadcast"}
    assert all(r["check"]["wrong_elements"] == 0 and "time_us" in r for r in run["results"])


def test_split_commands_merge_into_one_record(tmp_path):
    path = tmp_path / "collectives.json"
    prov = {"gpu": "G", "nccl": "2.27.3", "command": "first"}
    first = {"n_ranks": 8, "backend": "nccl", "ops": ["all_reduce"], "provenance": prov,
             "runs": [{"algo": None, "proto": None, "x": 1}, {"algo": "Ring", "proto": "LL", "x": 1}]}
    path.write_text(json.dumps(first))
    second = {"n_ranks": 8, "backend": "nccl", "ops": ["all_gather"], "provenance": dict(prov, command="second"),
              "runs": [{"algo": "Ring", "proto": "LL", "x": 2}]}
    merged = bc.merge_runs(path, second)
    assert [(r["algo"], r["proto"], r["x"]) for r in merged["runs"]] == [(None, None, 1), ("Ring", "LL", 2)]
    assert merged["ops"] == ["all_reduce", "all_gather"] and merged["earlier_commands"] == ["first"]
    other_gpu = dict(second, provenance=dict(prov, gpu="H"))
    assert bc.merge_runs(path, other_gpu)["runs"] == other_gpu["runs"]
    fetched = tmp_path / "fetched" / "g-x8"  # records fetched from a GPU machine, merged by the CLI
    fetched.mkdir(parents=True)
    (fetched / "collectives.json").write_text(json.dumps(second))
    (tmp_path / "records" / "g-x8").mkdir(parents=True)
    (tmp_path / "records" / "g-x8" / "collectives.json").write_text(json.dumps(first))
    assert bc.main(["--merge", str(tmp_path / "fetched"), "--out", str(tmp_path / "records")]) == 0
    on_disk = json.loads((tmp_path / "records" / "g-x8" / "collectives.json").read_text())
    assert [(r["algo"], r["proto"], r["x"]) for r in on_disk["runs"]] == [(None, None, 1), ("Ring", "LL", 2)]


def _synthetic(n: int, op: str, algo: str | None, alpha: float, beta: float, noise: float) -> dict:
    results = []
    for k, size in enumerate(bc.sizes(8, 2**32)):
        t = (alpha + size * beta) * (1 + noise * (1 if k % 2 else -1))
        results.append({"op": op, "size": size, "bytes": size, "time_us": t * 1e6})
    return {"n_ranks": n, "ops": [op], "gpu_slug": None,
            "runs": [{"algo": algo, "proto": "Simple" if algo else None, "results": results}]}


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_fit_recovers_alpha_and_beta(noise):
    alpha, link = 12e-6, 150e9  # 12 us, 150 GB/s per link direction
    n = 8
    beta = 2 * (n - 1) / n / link  # the ring all-reduce's inverse algbw
    (row,) = bc.fit([_synthetic(n, "all_reduce", "Ring", alpha, beta, noise)])
    tol = 1e-9 if noise == 0 else 0.03
    assert row["alpha_us"] == pytest.approx(alpha * 1e6, rel=tol)
    assert row["beta_s_per_byte"] == pytest.approx(beta, rel=tol)
    assert row["model_busbw_gbps"] == pytest.approx(link / 1e9, rel=tol)
    assert row["link_gbps"] == pytest.approx(link / 1e9, rel=tol)  # through code/runtime's model_time
    assert row["alpha_step_us"] == pytest.approx(alpha * 1e6 / (2 * (n - 1)), rel=tol)
    assert row["max_abs_residual_pct"] <= 100 * noise * 1.05 + 1e-6
    assert len(row["residuals_pct"]) == len(bc.sizes(8, 2**32))


def test_fit_cli_prints_the_table(tmp_path, capsys):
    folder = tmp_path / "x"
    folder.mkdir()
    (folder / "collectives.json").write_text(json.dumps(_synthetic(4, "all_gather", None, 8e-6, 1e-11, 0.0)))
    assert bc.main(["--fit", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "all_gather" in out and "default" in out and math.isfinite(float(out.splitlines()[1].split()[4]))


def test_scaling_cpu_ddp_gradients_equal_single_process(tmp_path):
    _run(["bench.scaling", "--cpu", "2", "--modes", "ddp", "--steps", "2", "--warmup", "1", "--out", str(tmp_path)],
         timeout=150)
    rec = json.loads((tmp_path / "cpu-gloo-x2" / "scaling.json").read_text())
    (check,) = rec["checks"]
    assert check["mode"] == "ddp" and check["ok"] is True and check["max_rel_grad_diff"] < 1e-5
    assert check["loss"] != pytest.approx(check["ref_loss"])  # each rank really saw only its half of the batch
    (row,) = rec["results"]
    assert row["mode"] == "ddp" and row["status"] == "ok" and row["tokens_per_step"] == 2 * 16 * 4
    assert row["tokens_per_s"] == pytest.approx(row["tokens_per_step"] / row["step_s"])
    assert 0 < row["scaling_efficiency"] and "step_no_sync_s" in row and 0 <= row["comm_share"]
    assert rec["baseline"]["mode"] == "plain" and rec["baseline"]["n"] == 1


def test_fit_compares_with_the_nvlink_ceiling(tmp_path, monkeypatch):
    (tmp_path / "data" / "hardware").mkdir(parents=True)
    (tmp_path / "data" / "hardware" / "gpus.yml").write_text(
        "gpus:\n  g:\n    device_name: G\n    nvlink_bandwidth_gbps: 900\n")  # datasheet: bidirectional per GPU
    monkeypatch.setattr(bc, "ROOT", tmp_path)
    assert bc.nvlink_ceiling_gbps("g-x8") == 450.0 and bc.nvlink_ceiling_gbps("other-x8") is None
    rec = _synthetic(8, "all_reduce", "Ring", 10e-6, 2 * 7 / 8 / 360e9, 0.0)
    rec["gpu_slug"] = "g-x8"
    (row,) = bc.fit([rec])
    assert row["model_busbw_gbps"] == pytest.approx(360.0, rel=1e-6)
    assert row["busbw_over_ceiling"] == pytest.approx(360.0 / 450.0, rel=1e-6)
