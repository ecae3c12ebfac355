"""The activation formula of memory_budget.py equals what autograd really keeps for a GPT layer
(code/framework/gpt_train.py), counted with saved-tensor hooks on the CPU."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code" / "framework"))
import gpt_train  # noqa: E402
import memory_budget as mb  # noqa: E402


@pytest.mark.parametrize("dtype,value_bytes", [(torch.bfloat16, 2), (torch.float32, 4)])
@pytest.mark.parametrize("s,b,h,a", [(64, 2, 64, 4), (32, 3, 96, 6)])
def test_saved_bytes_equal_the_formula(dtype, value_bytes, s, b, h, a):
    counted = gpt_train.layer_saved_bytes(s, b, h, a, dtype)
    # the formula without dropout, plus what it leaves out on purpose: each LayerNorm keeps a mean and a
    # 1/sigma per token (2 LayerNorms x 2 statistics x s*b values)
    layer_norm_stats = 4 * s * b * value_bytes
    assert counted == mb.layer_activation_bytes(s, b, h, a, value_bytes, dropout=False) + layer_norm_stats


@pytest.mark.parametrize("dtype,value_bytes", [(torch.bfloat16, 2), (torch.float32, 4)])
def test_full_recompute_keeps_only_the_layer_input(dtype, value_bytes):
    s, b, h, a = 64, 2, 64, 4
    assert gpt_train.layer_saved_bytes(s, b, h, a, dtype, recompute=True) == value_bytes * s * b * h
    assert mb.activation_bytes_per_layer(s, b, h, a, recompute="full") == 2 * s * b * h


def test_general_formula_reduces_to_korthikanti():
    s, b, h, a = 2048, 4, 2048, 16
    assert mb.layer_activation_bytes(s, b, h, a, 2, dropout=True) == mb.activation_bytes_per_layer(s, b, h, a)
    assert mb.layer_activation_bytes(s, b, h, a, 2, dropout=True) == s * b * h * (34 + 5 * a * s / h)


def test_recompute_matches_plain_training():
    torch.manual_seed(0)
    plain = gpt_train.GPT(2, 32, 4, 50, recompute=False, p=0.0)
    again = gpt_train.GPT(2, 32, 4, 50, recompute=True, p=0.0)
    again.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 50, (16, 2))
    for model in (plain, again):
        model(ids).float().square().mean().backward()
    for p, q in zip(plain.parameters(), again.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
