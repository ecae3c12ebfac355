"""Sparse matrix formats of docs/operator/spmv.md (COO, CSR, ELL, hybrid ELL-COO, JDS), a generator of
matrices whose row lengths follow a power law, and the counts the page derives for each format: the
padded slots of ELL, the idle lanes of a warp when one thread takes one row (CSR scalar, JDS) or one warp
takes one row (CSR vector), and the bytes each format reads.

Everything is NumPy. tests/test_operator_patterns.py checks each format's SpMV against
torch.sparse_csr_tensor(...) @ x and each count against its formula; notebooks/operator/spmv-lab.ipynb
builds the same arrays for its Triton kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class CSR:
    rowptr: np.ndarray  # int64, rows + 1
    cols: np.ndarray    # int64, nnz
    vals: np.ndarray    # float32, nnz
    shape: tuple[int, int]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.rowptr)


# --8<-- [start:generate]
def power_law_csr(rows: int, cols: int, alpha: float = 2.1, min_len: int = 1, max_len: int | None = None,
                  seed: int = 0, integer_values: bool = True) -> CSR:
    """A matrix whose row lengths follow a discrete power law P(len >= k) ~ (min_len / k)^(alpha - 1),
    as the degrees of web and social graphs do (alpha around 2 to 3), truncated at max_len (default:
    cols). Columns are drawn uniformly without repeats inside a row. With integer_values the entries
    are small integers, so every partial sum of a row is exact in float32 in any order."""
    rng = np.random.default_rng(seed)
    u = 1.0 - rng.random(rows)  # (0, 1]
    lengths = np.floor(min_len * u ** (-1.0 / (alpha - 1.0))).astype(np.int64)
    lengths = np.minimum(lengths, max_len if max_len is not None else cols)
    rowptr = np.concatenate([[0], np.cumsum(lengths)])
    col_idx = np.empty(int(rowptr[-1]), dtype=np.int64)
    for r in np.flatnonzero(lengths):
        col_idx[rowptr[r]:rowptr[r + 1]] = np.sort(rng.choice(cols, size=int(lengths[r]), replace=False))
    if integer_values:
        vals = rng.choice(np.array([-2, -1, 1, 2], dtype=np.float32), size=len(col_idx))
    else:
        vals = rng.standard_normal(len(col_idx)).astype(np.float32)
    return CSR(rowptr, col_idx, vals, (rows, cols))
# --8<-- [end:generate]


# --8<-- [start:formats]
def to_coo(a: CSR):
    """COO: one (row, col, val) triple per nonzero, here in row order."""
    return np.repeat(np.arange(a.shape[0]), a.lengths), a.cols, a.vals


def to_ell(a: CSR, width: int | None = None):
    """ELL: every row padded to `width` slots (default: the longest row), stored column-major so that
    the threads of consecutive rows read consecutive addresses. Padding: column 0, value 0.
    Rows longer than `width` are cut; to_hyb puts their rest into COO."""
    rows = a.shape[0]
    width = int(a.lengths.max(initial=0)) if width is None else width
    ell_cols = np.zeros((width, rows), dtype=np.int64)
    ell_vals = np.zeros((width, rows), dtype=np.float32)
    for r in range(rows):
        k = min(int(a.lengths[r]), width)
        ell_cols[:k, r] = a.cols[a.rowptr[r]:a.rowptr[r] + k]
        ell_vals[:k, r] = a.vals[a.rowptr[r]:a.rowptr[r] + k]
    return ell_cols, ell_vals


def to_hyb(a: CSR, width: int):
    """Hybrid ELL-COO: the first `width` nonzeros of every row in ELL, the rest of the long rows in COO."""
    ell_cols, ell_vals = to_ell(a, width)
    rows, cols, vals = to_coo(a)
    rank = np.arange(len(cols)) - np.repeat(a.rowptr[:-1], a.lengths)  # position of each nonzero in its row
    rest = rank >= width
    return (ell_cols, ell_vals), (rows[rest], cols[rest], vals[rest])


def to_jds(a: CSR):
    """JDS (jagged diagonal storage): rows sorted by length, longest first (perm[k] = original row of the
    k-th sorted row); jagged diagonal j holds the j-th nonzero of every sorted row that has one, and the
    sorted rows that have one are a prefix, so diagonal j is a contiguous run of jd_ptr[j+1] - jd_ptr[j]."""
    perm = np.argsort(-a.lengths, kind="stable")
    lens = a.lengths[perm]
    width = int(lens.max(initial=0))
    counts = np.array([int(np.count_nonzero(lens > j)) for j in range(width)], dtype=np.int64)
    jd_ptr = np.concatenate([[0], np.cumsum(counts)])
    jd_cols = np.empty(int(jd_ptr[-1]), dtype=np.int64)
    jd_vals = np.empty(int(jd_ptr[-1]), dtype=np.float32)
    for j in range(width):
        rows_j = perm[:counts[j]]
        jd_cols[jd_ptr[j]:jd_ptr[j + 1]] = a.cols[a.rowptr[rows_j] + j]
        jd_vals[jd_ptr[j]:jd_ptr[j + 1]] = a.vals[a.rowptr[rows_j] + j]
    return perm, jd_ptr, jd_cols, jd_vals
# --8<-- [end:formats]


def spmv_csr(a: CSR, x):
    y = np.zeros(a.shape[0], dtype=np.float64)
    rows, cols, vals = to_coo(a)
    np.add.at(y, rows, vals.astype(np.float64) * x[cols])
    return y


def spmv_ell(ell_cols, ell_vals, x):
    return (ell_vals.astype(np.float64) * x[ell_cols]).sum(axis=0)


def spmv_hyb(hyb, x, rows: int):
    (ell_cols, ell_vals), (r, c, v) = hyb
    y = spmv_ell(ell_cols, ell_vals, x)
    np.add.at(y, r, v.astype(np.float64) * x[c])  # the COO part: an atomic add per nonzero on the GPU
    return y


def spmv_jds(jds, x, rows: int):
    perm, jd_ptr, jd_cols, jd_vals = jds
    y_sorted = np.zeros(rows, dtype=np.float64)
    for j in range(len(jd_ptr) - 1):
        k = jd_ptr[j + 1] - jd_ptr[j]
        y_sorted[:k] += jd_vals[jd_ptr[j]:jd_ptr[j + 1]].astype(np.float64) * x[jd_cols[jd_ptr[j]:jd_ptr[j + 1]]]
    y = np.empty(rows, dtype=np.float64)
    y[perm] = y_sorted
    return y


# --8<-- [start:counts]
def ell_padding(lengths, width: int | None = None) -> int:
    """Padded slots of ELL: rows * width minus the nonzeros stored (ELL of width max(len) stores all)."""
    lengths = np.asarray(lengths)
    width = int(lengths.max(initial=0)) if width is None else width
    return len(lengths) * width - int(np.minimum(lengths, width).sum())


def one_row_per_thread_slots(lengths, warp: int = 32) -> int:
    """CSR scalar (one thread per row): a warp of 32 consecutive rows loops max(len) times and every
    lane takes a slot each time, busy or idle; the slots minus nnz are idle lanes (divergence)."""
    lengths = np.asarray(lengths)
    pad = (-len(lengths)) % warp
    return warp * int(np.pad(lengths, (0, pad)).reshape(-1, warp).max(axis=1).sum())


def one_row_per_warp_slots(lengths, warp: int = 32) -> int:
    """CSR vector (one warp per row): a row of len nonzeros takes ceil(len / 32) rounds of 32 lanes
    (an empty row still takes its warp for one round of setup; counted as 0 slots here)."""
    lengths = np.asarray(lengths)
    return warp * int((-(-lengths // warp)).sum())


def jds_slots(lengths, warp: int = 32) -> int:
    """JDS with one thread per sorted row: like CSR scalar, but neighbouring rows have similar lengths."""
    return one_row_per_thread_slots(np.sort(np.asarray(lengths))[::-1], warp)


def hyb_width(lengths, share: float = 1 / 3) -> int:
    """An ELL width for the hybrid format: the largest k such that at least `share` of the rows have k
    or more nonzeros: the rule of CUSP (Bell & Garland's library) with its default relative speed 3,
    without its minimum of 4096 rows."""
    lengths = np.sort(np.asarray(lengths))[::-1]
    k = int(np.ceil(share * len(lengths))) - 1
    return int(lengths[max(k, 0)])


def bytes_read(fmt: str, rows: int, nnz: int, slots: int = 0, coo: int = 0, idx: int = 4, val: int = 4) -> int:
    """Bytes of the matrix each format reads (x gathers and y writes, the same for all, left out):
    CSR nnz (col + val) + rows + 1 offsets; COO nnz (row + col + val); ELL slots (col + val);
    HYB the ELL slots plus its COO part; JDS nnz (col + val) + the permutation + diagonal offsets."""
    return {
        "csr": nnz * (idx + val) + (rows + 1) * idx,
        "coo": nnz * (2 * idx + val),
        "ell": slots * (idx + val),
        "hyb": slots * (idx + val) + coo * (2 * idx + val),
        "jds": nnz * (idx + val) + rows * idx,
    }[fmt]
# --8<-- [end:counts]
