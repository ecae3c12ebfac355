"""code/algorithm/positional.py against transformers' RoPE utilities and the properties
proved on docs/algorithm/positional-encoding.md."""
from __future__ import annotations

import math

import pytest
import torch

from algorithm_helpers import load_listing


pe = load_listing("algorithm_positional", "positional.py")
tt = load_listing("algorithm_tiny_transformer_pe", "tiny_transformer.py")


def test_sinusoidal_shift_is_a_fixed_rotation():
    d = 32
    table = pe.sinusoidal(200, d)
    for k in (1, 7, 50):
        m = pe.shift_matrix(k, d)
        torch.testing.assert_close(table[:-k] @ m.T, table[k:], rtol=0, atol=1e-12)
    # the dot product of two encodings depends on the offset only
    dots = (table[:-5] * table[5:]).sum(-1)
    assert torch.allclose(dots, dots[0].expand_as(dots), atol=1e-12)


def test_rope_score_depends_on_offset_only():
    torch.manual_seed(0)
    q, k = torch.randn(2, 64).unbind(0)
    inv, _ = pe.rope_inv_freq(64)

    def score(m, n):
        cm, sm = pe.rope_cos_sin_from(inv, torch.tensor([m]))
        cn, sn = pe.rope_cos_sin_from(inv, torch.tensor([n]))
        return (tt.apply_rope(q, cm, sm) * tt.apply_rope(k, cn, sn)).sum().item()

    for m, n in ((5, 2), (40, 10), (9, 9)):
        assert math.isclose(score(m, n), score(m + 1000, n + 1000), rel_tol=1e-3, abs_tol=1e-3)
    # plain frequencies equal those of the from-scratch model
    c1, s1 = pe.rope_cos_sin_from(inv, torch.arange(10))
    c2, s2 = tt.rope_cos_sin(torch.arange(10), 64)
    torch.testing.assert_close(c1, c2)
    torch.testing.assert_close(s1, s2)


def _hf_cfg(rope_type, factor, orig):
    from transformers import LlamaConfig

    params = {"rope_type": rope_type, "rope_theta": 10000.0, "factor": factor}
    if rope_type == "yarn":
        params["original_max_position_embeddings"] = orig
    return LlamaConfig(hidden_size=256, num_attention_heads=2, max_position_embeddings=int(orig * factor),
                       rope_parameters=params)


@pytest.mark.parametrize("factor,orig", [(4.0, 4096), (8.0, 2048), (2.0, 64)])
def test_yarn_and_pi_match_transformers(factor, orig):
    from transformers.modeling_rope_utils import _compute_linear_scaling_rope_parameters, _compute_yarn_parameters

    inv, att = _compute_yarn_parameters(_hf_cfg("yarn", factor, orig))
    ours, m = pe.rope_inv_freq(128, method="yarn", factor=factor, orig_len=orig)
    torch.testing.assert_close(ours, inv.float())
    assert math.isclose(m, att)
    inv, _ = _compute_linear_scaling_rope_parameters(_hf_cfg("linear", factor, orig))
    torch.testing.assert_close(pe.rope_inv_freq(128, method="pi", factor=factor)[0], inv.float())


def test_ntk_keeps_highest_and_divides_lowest_frequency_by_factor():
    d_h, s = 128, 8.0
    plain, _ = pe.rope_inv_freq(d_h)
    ntk, _ = pe.rope_inv_freq(d_h, method="ntk", factor=s)
    assert ntk[0] == plain[0] == 1.0
    assert math.isclose((plain[-1] / ntk[-1]).item(), s, rel_tol=1e-4)
    # in between, the stretch grows geometrically with the pair index
    ratio = plain / ntk
    assert torch.all(ratio[1:] > ratio[:-1])


def test_alibi_slopes():
    assert pe.alibi_slopes(8) == [2 ** -k for k in range(1, 9)]
    assert pe.alibi_slopes(4) == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]
    assert pe.alibi_slopes(12) == pe.alibi_slopes(8) + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]
    b = pe.alibi_bias(8, 5)
    assert b[0, 4, 1].item() == -0.5 * 3 and b[0, 1, 4].item() == 0.0
