"""The numbers in the tables of docs/hardware/numeric-formats.md are the ones code/hardware/formats.py
derives from the bits (exponent bits, mantissa bits, bias, special values).

The lab notebooks/hardware/format-bits.ipynb checks formats.py against torch (torch.finfo, the
decoding of every bit pattern, casts); this test checks the page against formats.py, so a figure
typed into the page cannot drift from the bits. It imports nothing from the notebook.
"""
from __future__ import annotations

import importlib.util
import math
import re
import sys

import numpy as np
import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("formats", ROOT / "code" / "hardware" / "formats.py")
F = importlib.util.module_from_spec(_spec)
sys.modules["formats"] = F
_spec.loader.exec_module(F)
PAGE = ROOT / "docs" / "hardware" / "numeric-formats.md"


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of the page as rows of stripped cells (header first, separator dropped)."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def table_with(header_word: str) -> list[list[str]]:
    matches = [t for t in tables(PAGE.read_text(encoding="utf-8")) if any(header_word in h for h in t[0])]
    assert len(matches) == 1, f"expected exactly one table whose header mentions {header_word!r}, found {len(matches)}"
    return matches[0]


def column(header: list[str], word: str) -> int:
    idx = [i for i, h in enumerate(header) if word in h]
    assert len(idx) == 1, f"expected one column named like {word!r} in {header}"
    return idx[0]


def latex_value(tex: str) -> float:
    """Evaluate the small LaTeX expressions the table uses: 2^{-14}, (2-2^{-23}) \\times 2^{127}, 1.75 \\times 2^{8}."""
    py = tex.replace("\\times", "*").replace("^{", "**(").replace("}", ")")
    assert re.fullmatch(r"[\d\s.()*+\-]+", py), f"unexpected LaTeX in the table: {tex!r}"
    return float(eval(py, {"__builtins__": {}}))  # noqa: S307 - digits and operators only, checked above


def check_cell(cell: str, want: float | None, where: str) -> None:
    """A cell is `无`/`—` (no such value), a plain number, or `$exact$ = decimal` / `$exact$ ≈ decimal`."""
    if want is None:
        assert cell in ("无", "—"), f"{where}: expected 无 (no such value), the page says {cell!r}"
        return
    exact = re.search(r"\$([^$]+)\$", cell)
    if exact:
        got = latex_value(exact.group(1))
        assert got == want, f"{where}: the page's exact form {exact.group(1)!r} = {got!r}, the bits give {want!r}"
    m = re.search(r"(?:^|[=≈]\s*)(-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*$", cell)
    assert m, f"{where}: no decimal value in {cell!r}"
    text = m.group(1)
    if "≈" in cell:  # rounded: must equal the true value rounded to the digits shown
        digits = len(re.sub(r"e.*", "", text).replace("-", "").replace(".", "").lstrip("0"))
        assert float(f"{want:.{digits}g}") == float(text), f"{where}: {text} is not {want!r} rounded to {digits} digits"
    elif "." in text and "=" not in cell:  # a plain rounded decimal, e.g. the decimal digits column
        decimals = len(text.split(".")[1])
        assert round(want, decimals) == float(text), f"{where}: {text} is not {want!r} rounded to {decimals} places"
    else:
        assert float(text) == want, f"{where}: {text} != {want!r}"


def test_range_and_precision_table_matches_the_bits():
    table = table_with("最小次正规数")
    header, rows = table[0], {r[0]: r for r in table[1:]}
    assert set(rows) == set(F.FLOATS), f"rows {sorted(rows)} != formats {sorted(F.FLOATS)}"
    cols = {key: column(header, word) for key, word in [
        ("layout", "位宽"), ("bias", "偏置"), ("max_normal", "最大正规数"), ("min_normal", "最小正规数"),
        ("min_subnormal", "最小次正规数"), ("eps", "ε"), ("decimal_digits", "十进制")]}
    for name, fmt in F.FLOATS.items():
        row = rows[name]
        assert row[cols["layout"]] == f"{fmt.bits}（{int(fmt.signed)}/{fmt.exp_bits}/{fmt.man_bits}）", name
        assert int(row[cols["bias"]]) == fmt.bias, name
        for key in ("max_normal", "min_normal", "min_subnormal", "eps"):
            check_cell(row[cols[key]], getattr(fmt, key), f"{name} / {key}")
        if fmt.man_bits > 0:
            check_cell(row[cols["decimal_digits"]], fmt.decimal_digits, f"{name} / decimal digits")
        else:
            assert row[cols["decimal_digits"]] == "—", name


def test_storage_table_matches_the_bits():
    table = table_with("每参数字节")
    header, rows = table[0], {r[0]: r for r in table[1:]}
    assert set(rows) == set(F.STORAGE_BITS)
    c_bits, c_bytes, c_gb, c_cards = (column(header, w) for w in ("每参数位数", "每参数字节", "70B", "H200"))
    for name in F.STORAGE_BITS:
        row = rows[name]
        assert float(re.match(r"[\d.]+", row[c_bits]).group()) == F.STORAGE_BITS[name], name
        assert float(row[c_bytes]) == F.bytes_per_param(name), name
        gb = F.weights_gb(70e9, name)
        assert row[c_gb] == f"{gb:.2f}", f"{name}: 70B weights {gb:.4f} GB, the page says {row[c_gb]}"
        assert int(re.match(r"\d+", row[c_cards]).group()) == math.ceil(gb / 141), name


def test_integer_table_matches_twos_complement():
    table = table_with("对称量化常用区间")
    header, rows = table[0], {r[0]: r for r in table[1:]}
    c_range, c_sym, c_bytes = (column(header, w) for w in ("取值区间", "对称", "字节"))
    for name, bits in [("int8", 8), ("int4", 4)]:
        lo, hi = F.int_range(bits)
        assert [int(v) for v in re.findall(r"-?\d+", rows[name][c_range])] == [lo, hi], name
        assert [int(v) for v in re.findall(r"-?\d+", rows[name][c_sym])] == [-hi, hi], name
        assert float(rows[name][c_bytes]) == F.bytes_per_param(name), name


def test_prose_figures():
    text = PAGE.read_text(encoding="utf-8")
    assert str(F.int8_dot_terms_before_int32_overflow()) in text  # 127·127·K within int32
    assert f"{math.log(F.FP16.max_normal):.2f}" in text  # exp overflows fp16 above ln(65504)


@pytest.mark.parametrize("fmt", [F.E4M3, F.E5M2, F.E2M3, F.E3M2, F.E2M1], ids=lambda f: f.name)
def test_quantize_rounds_ties_to_even_and_keeps_representable_values(fmt):
    v = fmt.all_values()
    pos = np.unique(v[np.isfinite(v) & (v >= 0)])
    np.testing.assert_array_equal(F.quantize(fmt, pos), pos)
    mids = (pos[:-1] + pos[1:]) / 2
    got = F.quantize(fmt, mids)
    codes = {val: i for i, val in enumerate(v[: len(v) // 2]) if np.isfinite(val)}
    assert all(codes[g] % 2 == 0 for g in got), "a tie must go to the even code"


def test_block_formats_on_a_small_tensor():
    rng = np.random.default_rng(0)
    w = rng.standard_normal(32 * 64)
    w[rng.random(w.size) < 1e-2] *= 20
    err = {name: np.sqrt(np.mean((q - w) ** 2) / np.mean(w**2))
           for name, q in [("mxfp4", F.mx_quantize(w, F.E2M1)), ("nvfp4", F.nvfp4_quantize(w))]}
    assert err["nvfp4"] < err["mxfp4"]
    grid = np.tile([0, 0.5, 1, 1.5, 2, 3, 4, 6], 4)
    np.testing.assert_array_equal(F.mx_quantize(grid, F.E2M1), grid)
    np.testing.assert_array_equal(F.nvfp4_quantize(grid), grid)
