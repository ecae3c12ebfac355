"""The counting models behind docs/operator/scan.md, histogram.md, spmv.md and fast-math.md.

code/operator/scan_patterns.py runs the Kogge-Stone, Brent-Kung and coarsened block scans step by step,
and counts the atomics of the histogram strategies; code/operator/sparse_formats.py builds COO, CSR, ELL,
HYB and JDS and counts the slots each SpMV work split executes. Here every count equals its closed form,
every result equals numpy/torch on random inputs (edge sizes included), and the figures the pages quote
are recomputed. The Triton kernels themselves live in the labs (notebooks/operator/scan-lab.ipynb,
histogram-lab.ipynb, spmv-lab.ipynb), which CI executes; the CUDA listings are compiled by
tests/test_cuda_sources.py and run by `make gpu-check`. The last test compiles small Triton kernels to
PTX (no GPU needed) to check which instructions fast-math.md says Triton emits.
"""
from __future__ import annotations

import importlib.util
import math
import re
import sys
import warnings

import numpy as np
import pytest
import torch

from conftest import ROOT


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "code" / "operator" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


SP = _load("scan_patterns")
SF = _load("sparse_formats")
DOCS = ROOT / "docs" / "operator"
EDGE_SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1000, 1023, 1024, 1025]


# ----------------------------------------------------------------------------------------------- scan

@pytest.mark.parametrize("n", EDGE_SIZES)
def test_block_scan_models_equal_cumsum(n):
    x = np.random.default_rng(n).integers(-50, 51, n)
    expected = torch.cumsum(torch.from_numpy(x), 0).numpy()
    for model in (SP.kogge_stone, SP.brent_kung):
        assert np.array_equal(model(x)[0], expected), model.__name__
    for threads in (1, 2, 4, 8, 32):
        assert np.array_equal(SP.coarsened_scan(x, threads)[0], expected), threads


def test_scan_counts_equal_the_formulas():
    for n in range(1, 2049):
        steps, adds = SP.kogge_stone(np.ones(n, dtype=np.int64))[1:]
        assert (steps, adds) == SP.kogge_stone_counts(n)
        assert adds == sum(n - 2**k for k in range(math.ceil(math.log2(n)))) if n > 1 else adds == 0
    for m in range(0, 13):
        n = 1 << m
        assert SP.brent_kung(np.ones(n, dtype=np.int64))[1:] == SP.brent_kung_counts(n) == (max(0, 2 * m - 1), 2 * n - 2 - m)
        for threads in (1, 2, 4, 16, 256):
            if n % threads == 0:
                c, lg = n // threads, threads.bit_length() - 1
                ks = threads * lg - (threads - 1)
                expected = (2 * (c - 1) + lg, threads * (c - 1) + ks + (threads - 1) * (c - 1))
                assert SP.coarsened_scan(np.ones(n, dtype=np.int64), threads)[1:] == SP.coarsened_counts(n, threads) == expected


def test_brent_kung_does_about_2n_work_and_kogge_stone_n_log_n():
    for m in range(4, 16):
        n = 1 << m
        ks, bk = SP.kogge_stone_counts(n)[1], SP.brent_kung_counts(n)[1]
        assert bk < 2 * n < ks
        assert ks == n * m - n + 1
    # coarsening is work-efficient once c exceeds log2(T)
    assert SP.coarsened_counts(1 << 16, 256)[1] < 2.2 * (1 << 16)


def test_scan_page_table_matches_the_formulas():
    text = (DOCS / "scan.md").read_text(encoding="utf-8")
    steps, adds = SP.kogge_stone_counts(1024)
    assert f"| 1024 | Kogge-Stone | {steps} | {adds:,} | {adds / 1023:.2f} |" in text
    steps, adds = SP.brent_kung_counts(1024)
    assert f"| 1024 | Brent-Kung | {steps} | {adds:,} | {adds / 1023:.2f} |" in text
    steps, adds = SP.coarsened_counts(4096, 256)
    assert f"| 4096 | 三阶段粗化（$T = 256$，$c = 16$） | {steps} | {adds:,} | {adds / 4095:.2f} |" in text


def test_scan_traffic():
    assert SP.SCAN_TRAFFIC == {"scan-then-propagate": 4, "reduce-then-scan": 3, "single-pass": 2}
    assert SP.scan_bytes("single-pass", 1 << 28) == 8 * (1 << 28)


@pytest.mark.parametrize("n", [1, 2, 33, 1000])
def test_compaction_equals_masked_select(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    for threshold in (-10.0, 0.0, 0.7, 10.0):
        keep = (x > threshold).numpy()
        assert np.array_equal(SP.compact(x.numpy(), keep), torch.masked_select(x, x > threshold).numpy())


# ------------------------------------------------------------------------------------------ histogram

def test_histogram_atomic_counts():
    rng = np.random.default_rng(0)
    uniform = rng.integers(0, 256, 1 << 14)
    runs = np.repeat(rng.integers(0, 256, 1 << 10), rng.integers(1, 65, 1 << 10))[: 1 << 14]
    for bins in (uniform, runs):
        n = len(bins)
        assert SP.atomics_per_element(bins) == n
        # brute force: distinct bins per 32-element warp, runs per chunk
        assert SP.atomics_match_any(bins) == sum(len(set(bins[s:s + 32].tolist())) for s in range(0, n, 32))
        assert SP.atomics_run_aggregated(bins, 64) == sum(
            1 + sum(a != b for a, b in zip(bins[s:s + 64][1:], bins[s:s + 64][:-1])) for s in range(0, n, 64))
        assert SP.atomics_match_any(bins) <= n and SP.atomics_run_aggregated(bins, 64) <= n
    assert SP.atomics_match_any(runs) < SP.atomics_match_any(uniform) / 5  # aggregation pays off on runs only
    same = np.zeros(4096, dtype=np.int64)
    assert SP.atomics_match_any(same) == 4096 // 32 and SP.max_same_address(same) == 32
    assert SP.atomics_match_any(np.arange(4096) % 256) == 4096 and SP.max_same_address(np.arange(4096) % 256) == 1


# ---------------------------------------------------------------------------------------------- SpMV

def _torch_spmv(a, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        A = torch.sparse_csr_tensor(torch.from_numpy(a.rowptr), torch.from_numpy(a.cols), torch.from_numpy(a.vals),
                                    size=a.shape, check_invariants=True)
        return (A.double() @ torch.from_numpy(x).double()).numpy()


MATRICES = [(1, 1, 1, None), (1, 7, 1, None), (5, 1, 1, None), (37, 50, 1, None), (300, 200, 1, None),
            (500, 64, 2, 16), (2000, 3000, 1, None)]


@pytest.mark.parametrize("rows,cols,min_len,max_len", MATRICES)
def test_every_format_equals_torch_sparse(rows, cols, min_len, max_len):
    a = SF.power_law_csr(rows, cols, alpha=2.1, min_len=min_len, max_len=max_len, seed=rows + cols)
    x = np.random.default_rng(rows).integers(-2, 3, cols).astype(np.float32)
    expected = _torch_spmv(a, x)
    assert np.array_equal(SF.spmv_csr(a, x), expected)
    assert np.array_equal(SF.spmv_ell(*SF.to_ell(a), x), expected)
    for width in (0, 1, SF.hyb_width(a.lengths), int(a.lengths.max())):
        assert np.array_equal(SF.spmv_hyb(SF.to_hyb(a, width), x, rows), expected), width
    assert np.array_equal(SF.spmv_jds(SF.to_jds(a), x, rows), expected)
    r, c, v = SF.to_coo(a)
    dense = np.zeros(a.shape)
    np.add.at(dense, (r, c), v)
    assert np.array_equal(dense @ x.astype(np.float64), expected)


def test_generator_properties():
    a = SF.power_law_csr(3000, 500, alpha=2.1, min_len=2, seed=1)
    assert a.lengths.min() >= 2 and a.lengths.max() <= 500
    for r in range(3000):  # columns distinct and sorted inside each row
        row = a.cols[a.rowptr[r]:a.rowptr[r + 1]]
        assert np.all(np.diff(row) > 0)
    assert set(np.unique(a.vals)) <= {-2.0, -1.0, 1.0, 2.0}
    # the tail follows P(len >= k) = (2 / k)^1.1: check it at k = 8 within 4 standard errors
    p = (2 / 8) ** 1.1
    share = np.mean(a.lengths >= 8)
    assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / 3000)


def test_slot_counts_equal_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(20):
        lengths = rng.integers(0, 200, rng.integers(1, 200))
        per_thread = sum(32 * int(lengths[s:s + 32].max()) for s in range(0, len(lengths), 32))
        assert SF.one_row_per_thread_slots(lengths) == per_thread
        assert SF.one_row_per_warp_slots(lengths) == sum(32 * math.ceil(L / 32) for L in lengths)
        assert SF.jds_slots(lengths) <= SF.one_row_per_thread_slots(lengths)
        assert SF.ell_padding(lengths) == len(lengths) * int(lengths.max()) - int(lengths.sum())
        assert SF.ell_padding(lengths, 5) == len(lengths) * 5 - int(np.minimum(lengths, 5).sum())


def test_hyb_width_is_the_cusp_rule():
    """CUSP's compute_optimal_entries_per_row (relative speed 3, the 4096-row minimum left out): the
    smallest i such that the rows longer than i are fewer than a third of all rows."""
    rng = np.random.default_rng(6)
    for _ in range(50):
        lengths = rng.integers(0, 40, rng.integers(1, 300))
        hist = np.bincount(lengths)
        remaining, k = len(lengths), int(lengths.max())
        for i in range(int(lengths.max())):
            remaining -= hist[i]
            if 3.0 * remaining < len(lengths):
                k = i
                break
        assert SF.hyb_width(lengths) == k


def test_spmv_page_table_matches_the_generator():
    big = SF.power_law_csr(1 << 16, 1 << 16, alpha=2.1, min_len=2, seed=0)
    L = big.lengths
    rows, nnz, longest = len(L), int(L.sum()), int(L.max())
    K = SF.hyb_width(L)
    coo = int(np.maximum(L - K, 0).sum())
    text = (DOCS / "spmv.md").read_text(encoding="utf-8")
    assert f"得到 {nnz:,} 个非零元，平均每行 {nnz / rows:.1f} 个，中位数只有 {int(np.median(L))}，最长的一行 {longest:,} 个" in text
    rows_expected = {
        "CSR 标量（一线程一行）": SF.one_row_per_thread_slots(L),
        "CSR 向量（一 warp 一行）": SF.one_row_per_warp_slots(L),
        "JDS（排序后一线程一行）": SF.jds_slots(L),
        "ELL（补齐到最长行）": rows * longest,
        f"HYB（ELL 宽 {K} + COO {coo:,} 个）": rows * K + coo,
    }
    for label, slots in rows_expected.items():
        assert f"| {label} | {slots:,} | {nnz / slots:.2%} |" in text, label
    assert f"{coo / nnz:.0%} 的非零元落进 COO" in text
    assert f"串行处理 {longest:,} 个非零元；一个 warp 一行时是 {math.ceil(longest / 32):,} 轮" in text
    assert f"只有 {nnz / SF.one_row_per_thread_slots(L):.0%} 的槽位在干活" in text


# ------------------------------------------------------------------------------------------- fast math

def _triton_ptx(body: str) -> str:
    """PTX of a one-line elementwise Triton kernel for sm_90 (compiled without a GPU)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ns = {}
    src = ("import triton\nimport triton.language as tl\n"
           "@triton.jit\n"
           "def k(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
           "    offs = tl.arange(0, BLOCK)\n"
           "    x = tl.load(x_ptr + offs)\n"
           f"    tl.store(y_ptr + offs, {body})\n")
    path = ROOT / ".cache" / "test-triton-ptx" / f"k_{abs(hash(body))}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(src, encoding="utf-8")  # Triton reads a kernel's source from its file
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ns["k"] = module.k
    ast = ASTSource(fn=ns["k"], signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": "constexpr"},
                    constexprs={"BLOCK": 128})
    return triton.compile(ast, target=GPUTarget("cuda", 90, 32)).asm["ptx"]


@pytest.mark.parametrize("body,instruction,absent", [
    ("tl.exp(x)", "ex2.approx.f32", None),
    ("x / (x + 3.0)", "div.full.f32", "div.rn.f32"),
    ("tl.div_rn(x, x + 3.0)", "div.rn.f32", "div.full.f32"),
    ("tl.sqrt(x)", "sqrt.approx.ftz.f32", "sqrt.rn.f32"),
    ("tl.sqrt_rn(x)", "sqrt.rn.f32", "sqrt.approx"),
])
def test_triton_fp32_math_instructions(body, instruction, absent, monkeypatch):
    """What fast-math.md says Triton 3.9 emits for fp32 on sm_90."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    try:
        ptx = _triton_ptx(body)
    except Exception as exc:  # noqa: BLE001 - no CUDA backend in this triton build
        pytest.skip(f"Triton cannot compile for sm_90 here: {type(exc).__name__}: {exc}"[:200])
    found = set(re.findall(r"\b(?:ex2|div|sqrt|rcp)\.[a-z0-9.]+", ptx))
    assert instruction in found, (body, sorted(found))
    if absent:
        assert not any(f.startswith(absent) for f in found), (body, sorted(found))
    page = (DOCS / "fast-math.md").read_text(encoding="utf-8")
    assert instruction in page
