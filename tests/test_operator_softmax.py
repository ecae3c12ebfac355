"""Masked rows in the online softmax of docs/operator/softmax.md.

code/operator/online_softmax.py models the CUDA kernel of code/operator/online-softmax.cu (same lanes, same
-FLT_MAX start, same merge); this file checks on the CPU what the page says about masking: rows with some -inf
entries match torch.softmax, a row that is entirely -inf comes out as zeros with the kernel's d == 0 guard and
as NaN without it, and the PyTorch behaviour the page quotes (torch.softmax gives NaN for such a row,
_safe_softmax and SDPA's math backend give 0) holds for the installed torch. The CUDA file itself is compiled
by tests/test_cuda_sources.py and run, with its fully masked cases, by `make gpu-check`.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("online_softmax", ROOT / "code" / "operator" / "online_softmax.py")
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)
CUDA = ROOT / "code" / "operator" / "online-softmax.cu"
PAGE = ROOT / "docs" / "operator" / "softmax.md"


def _logits(rows, cols, offset=0.0, seed=0):
    x = np.random.default_rng(seed).uniform(-8, 8, (rows, cols)).astype(np.float32) + np.float32(offset)
    mask = np.random.default_rng(seed + 1).random((rows, cols)) < 0.25
    mask[:, 0] = False                                     # keep one finite entry per row
    x[mask] = -np.inf
    return x


def _torch_softmax(x):
    return torch.softmax(torch.from_numpy(x).double(), dim=-1).numpy()


@pytest.mark.parametrize("threads", [32, 256])
@pytest.mark.parametrize("rows, cols, offset", [(4, 1, 0.0), (3, 100, 0.0), (8, 3000, 0.0), (8, 3000, 1000.0),
                                                (8, 3000, -1000.0), (2, 10007, 0.0)])
def test_partially_masked_rows_match_torch(rows, cols, offset, threads):
    x = _logits(rows, cols, offset)
    y = S.online_softmax(x, threads=threads)
    assert y.dtype == np.float32 and np.isfinite(y).all()
    # Tolerance as in online-softmax.cu: float32 expf and a tree sum of a few thousand terms stay near 1e-6
    # relative; 1e-5 leaves room. Masked entries must be exactly 0.
    np.testing.assert_allclose(y, _torch_softmax(x), rtol=1e-5, atol=1e-12)
    assert (y[np.isneginf(x)] == 0).all()


@pytest.mark.parametrize("cols", [1, 7, 300])
def test_fully_masked_row_gives_zeros_with_the_guard_and_nan_without(cols):
    x = _logits(5, cols)
    x[[1, 3]] = -np.inf                                     # two rows with nothing to attend to
    y = S.online_softmax(x, threads=32)
    assert (y[[1, 3]] == 0).all()
    kept = [0, 2, 4]
    np.testing.assert_allclose(y[kept], _torch_softmax(x[kept]), rtol=1e-5, atol=1e-12)
    unguarded = S.online_softmax(x, threads=32, guard_empty_rows=False)
    assert np.isnan(unguarded[[1, 3]]).all()               # 0 * (1 / 0): the erratum the page explains
    np.testing.assert_array_equal(unguarded[kept], y[kept])  # the guard changes nothing else


def test_pytorch_conventions_quoted_on_the_page():
    x = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3])
    assert torch.softmax(x, -1)[1].isnan().all()           # plain softmax: NaN
    safe = torch.ops.aten._safe_softmax(x, -1)             # what SDPA's math backend calls
    assert (safe[1] == 0).all() and torch.allclose(safe[0], torch.softmax(x, -1)[0])
    np.testing.assert_array_equal(S.online_softmax(x.numpy())[1], safe[1].numpy())
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 4, 8) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False                                        # query 2 may attend to no key
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (out[0, 0, 2] == 0).all() and out[0, 0, [0, 1, 3]].isfinite().all()


def test_cuda_listing_and_page_agree_with_the_model():
    src = CUDA.read_text(encoding="utf-8")
    assert "const float inv_d = total.d > 0.0f ? 1.0f / total.d : 0.0f;" in src   # the same guard
    assert "MD acc{-FLT_MAX, 0.0f};" in src                                        # the same start
    assert "{32, 3000, 0.0f, true, 4}" in src and "{4, 1, 0.0f, false, 2}" in src  # fully masked cases run
    page = PAGE.read_text(encoding="utf-8")
    assert '--8<-- "code/operator/online_softmax.py:reference"' in page
    assert "输入中被掩码的 $-\\infty$ 也自然贡献 0" not in page                     # the erratum
