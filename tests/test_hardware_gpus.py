"""The spec table of docs/hardware/gpu-architecture.md equals data/hardware/gpus.yml, field by field,
and the derived figures the page quotes are the ones the YAML implies."""
from __future__ import annotations

import re

import yaml

from conftest import ROOT

PAGE = ROOT / "docs" / "hardware" / "gpu-architecture.md"
GPUS = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]


def spec_table() -> dict[str, list[str]]:
    text = PAGE.read_text(encoding="utf-8")
    block = text.split("| 字段 |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    header = [c.strip() for c in block.splitlines()[0].strip().strip("|").split("|")]
    rows["__header__"] = header
    return rows


def test_every_yaml_figure_is_in_the_table():
    rows = spec_table()
    names = rows.pop("__header__")
    for col, (key, spec) in enumerate(GPUS.items()):
        assert names[col] == spec["name"], (names, spec["name"])
        for field, value in spec.items():
            if field in ("name", "device_name", "sources"):
                continue
            assert field in rows, f"{field} missing from the page's table"
            assert float(rows[field][col]) == float(value), f"{key}.{field}: page {rows[field][col]} != yaml {value}"
        assert set(rows) == {f for f in spec if f not in ("name", "device_name", "sources")}


def test_derived_figures():
    h = GPUS["nvidia-h200"]
    text = PAGE.read_text(encoding="utf-8")
    assert round(h["bf16_tensor_dense_tflops"] * 1e12 / (h["memory_bandwidth_gbps"] * 1e9)) == 206
    assert round(h["fp8_tensor_dense_tflops"] * 1e12 / (h["memory_bandwidth_gbps"] * 1e9)) == 412
    assert round(h["fp32_tflops"] * 1e12 / (h["memory_bandwidth_gbps"] * 1e9)) == 14
    assert f"{h['bf16_tensor_dense_tflops'] / h['fp32_tflops']:.1f}" == "14.8"
    for quoted in ("206", "412", "14.8"):
        assert quoted in text


def test_h100_peak_arithmetic():
    # 132 SMs x 4 Tensor Cores x 512 FMA/clock x 2 FLOP x 1.83 GHz ~ 989 TFLOPS (Hopper In-Depth)
    assert abs(132 * 4 * 512 * 2 * 1.83e9 / 1e12 - 989) < 1
    assert re.search(r"1\.83(\\ |\s)*\\text\{GHz\}\s*\\approx\s*989", PAGE.read_text(encoding="utf-8"))
