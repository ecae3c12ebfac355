"""code/operator/decode_attention.py (docs/operator/decode-attention.md): the four decode-attention rungs
(one program per query head, split-KV with an exact merge, paged through a block table, paged + GQA packing)
equal float32 SDPA within the fp16-derived bound, in Triton's CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1); a merge that skips the rescale is rejected by that bound; MLA's absorbed decode equals
the decompressed one; the cost formulas equal counts. notebooks/operator/decode-attention-lab.ipynb repeats
these checks with the bound explained and adds the GPU bench cell.
"""
from __future__ import annotations

import math

import pytest
import torch

from conftest import ROOT, load_listing

D = load_listing(ROOT / "code" / "operator" / "decode_attention.py", "operator_decode_attention")


def _case(seed=0, B=3, h_q=4, h_kv=2, d=32, lens=(37, 80, 5)):
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor(lens, dtype=torch.int32)
    L = int(lens.max())
    q = torch.randn(B, h_q, d, generator=g).half()
    k, v = (torch.randn(B, L, h_kv, d, generator=g).half() for _ in range(2))
    ref = D.DecodeReference(q, [(k[b, :n], v[b, :n]) for b, n in enumerate(lens.tolist())])
    return g, q, k, v, lens, ref


@pytest.mark.parametrize("mode", ["naive", "split"])
def test_contiguous_rungs_match_sdpa(mode):
    _, q, k, v, lens, ref = _case()
    out = D.decode_attention(q, k, v, lens, mode, out=torch.full_like(q, float("nan")))
    ref.check(out, mode)


@pytest.mark.parametrize("mode", ["paged", "gqa"])
def test_paged_rungs_match_sdpa_with_random_blocks_and_ragged_lengths(mode):
    g, q, k, v, lens, ref = _case(seed=1)
    kp, vp, table = D.page_cache(k, v, lens, 16, g)
    used = table[table != 0].tolist()
    assert sorted(used) != list(range(1, len(used) + 1))  # ids are scattered, not 0..n-1 in order
    for b, n in enumerate(lens.tolist()):
        assert torch.equal(D.gather_pages(kp, table[b], n), k[b, :n])
    out = D.decode_attention(q, kp, vp, lens, mode, block_table=table, page=16, splits=3,
                             out=torch.full_like(q, float("nan")))
    ref.check(out, mode)


def test_merge_equals_softmax_over_concatenation_and_wrong_merge_is_rejected():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(3, 40, generator=g, dtype=torch.float64) * 4  # 3 rows of scores
    v = torch.randn(40, 8, generator=g, dtype=torch.float64)
    parts = [(s[:, i:j], v[i:j]) for i, j in ((0, 7), (7, 25), (25, 40))]
    m = [p.amax(-1) for p, _ in parts]
    ell = [torch.exp(p - mi[:, None]).sum(-1) for (p, _), mi in zip(parts, m)]
    acc = [torch.exp(p - mi[:, None]) @ vv for (p, vv), mi in zip(parts, m)]
    big = torch.stack(m).amax(0)
    w = [torch.exp(mi - big) for mi in m]
    merged = sum(wi[:, None] * a for wi, a in zip(w, acc)) / sum(wi * li for wi, li in zip(w, ell))[:, None]
    torch.testing.assert_close(merged, torch.softmax(s, -1) @ v, rtol=1e-12, atol=1e-12)
    # A merge that averages the normalised partial outputs (no weights) is wrong, and the bound sees it
    _, q, k, v16, lens, ref = _case(seed=3, B=1, h_q=2, h_kv=1, lens=(64,))
    out = D.decode_attention(q, k, v16, lens, "split", splits=4)
    halves = [D.DecodeReference(q, [(k[0, i:i + 16], v16[0, i:i + 16])]).o for i in range(0, 64, 16)]
    with pytest.raises(AssertionError):
        ref.check(torch.stack(halves).mean(0).half(), "unweighted merge")
    ref.check(out, "split")


def test_mla_absorbed_equals_decompressed_and_deepseek_v3_costs():
    g = torch.Generator().manual_seed(4)
    H, d_h, d_c, d_r, L = 4, 16, 32, 8, 50
    shapes = [(H, d_h), (H, d_r), (L, d_c), (L, d_r), (H, d_h, d_c), (H, d_h, d_c)]
    args = [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]
    torch.testing.assert_close(D.mla_decode_absorbed(*args), D.mla_decode_decompressed(*args),
                               rtol=1e-10, atol=1e-10)
    c = D.mla_costs(heads=128, d_h=128, d_c=512, d_r=64)
    assert c["cache_bytes"] == {"mha": 81920, "latent": 1152}
    assert c["flops"]["absorbed"] == 2 * 128 * 576 + 2 * 128 * 512 == 278528
    assert c["flops"]["absorbed"] / c["cache_bytes"]["latent"] > 200 > c["flops"]["mha"] / c["cache_bytes"]["mha"]
    # the page's table: 71x less cache, ~242 FLOP/B absorbed, decompressing costs ~120x the absorbed FLOPs
    assert round(c["cache_bytes"]["mha"] / c["cache_bytes"]["latent"]) == 71
    assert round(c["flops"]["absorbed"] / c["cache_bytes"]["latent"]) == 242
    assert round(c["flops"]["decompress"] / c["flops"]["absorbed"]) == 121
    assert round(c["flops"]["absorbed"] / c["flops"]["mha"], 1) == 3.4
    assert c["flops_per_step_absorbed"] == 2 * 128 * 128 * 512 * 2


def test_cost_formulas():
    flops, moved = D.decode_cost(2, 1000, 32, 8, 128)
    assert flops == 4 * 2 * 32 * 1000 * 128
    assert moved == 2 * 2 * 1000 * 8 * 128 * 2 + 2 * 2 * 32 * 128 * 2
    assert math.isclose(D.decode_intensity(32, 8, 128, 1 << 20), 4, rel_tol=1e-3)  # G = 4
    splits, chunk = D.num_splits(1, 32, 65536, 132, 64)
    assert splits * 32 >= 2 * 132 and chunk % 64 == 0 and splits * chunk >= 65536
    assert D.num_splits(256, 32, 2048, 132, 64)[0] == 1  # enough programs already
