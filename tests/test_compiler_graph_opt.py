"""code/compiler/graph_opt.py: Conv+BN folding against PyTorch's eval-mode Conv2d -> BatchNorm2d and its own fusion
utility; the FX passes against the unoptimised graph; the traffic model against a byte count."""
from __future__ import annotations

import operator
import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "code" / "compiler"))
import graph_opt as go  # noqa: E402


@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_bn_folding_matches_eval_mode(with_bias):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=with_bias).double()
    bn = torch.nn.BatchNorm2d(8, eps=1e-3).double()
    with torch.no_grad():  # non-trivial running statistics and affine parameters
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    conv.eval(), bn.eval()
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64)
    w, b = go.fold_conv_bn(conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
    folded = torch.nn.functional.conv2d(x, w, b, padding=1)
    with torch.no_grad():
        # float64: the only difference is rounding of a reordered product, ~1e-15 relative
        torch.testing.assert_close(folded, bn(conv(x)), rtol=1e-12, atol=1e-12)
        ref = torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)
        torch.testing.assert_close(w, ref.weight, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(b, ref.bias, rtol=1e-12, atol=1e-12)


def test_conv_bn_folding_is_not_valid_in_training_mode():
    torch.manual_seed(0)
    conv, bn = torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4)
    x = torch.randn(4, 3, 5, 5) * 3 + 1
    w, b = go.fold_conv_bn(conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
    with torch.no_grad():
        train_out = bn.train()(conv(x))  # normalises by the batch's statistics, not the running ones
        assert not torch.allclose(torch.nn.functional.conv2d(x, w, b), train_out, atol=1e-3)


def f_redundant(x, y):
    a = torch.mul(x, y)
    b = torch.mul(x, y)  # the same expression again
    c = torch.add(a, 0)  # identity
    unused = torch.exp(x)  # dead
    return torch.relu(c + b) * 1


def test_fx_passes_shrink_the_graph_and_keep_the_result():
    gm = torch.fx.symbolic_trace(f_redundant)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    ref = f_redundant(x, y)
    calls = lambda: sum(n.op == "call_function" for n in gm.graph.nodes)  # noqa: E731
    assert calls() == 7  # mul, mul, add, exp, add, relu, mul
    assert go.cse(gm) == 1
    assert go.simplify(gm) == 2
    assert go.dce(gm) == 1
    assert calls() == 3  # mul, add, relu
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [torch.mul, operator.add, torch.relu]
    torch.testing.assert_close(gm(x, y), ref, rtol=0, atol=0)


def test_traffic_model_of_gelu_chain():
    n = 1 << 20
    # gelu(x * s + t) in fp16 with s and t full tensors: 3 kernels, the first two read two inputs
    unfused = go.unfused_bytes(2, n, 2, extra_inputs=1) + go.unfused_bytes(1, n, 2)
    assert unfused == (3 + 3 + 2) * n * 2
    assert go.fused_bytes(n, 2, n_inputs=3) == 4 * n * 2
    assert go.unfused_bytes(3, n, 2) == 3 * go.fused_bytes(n, 2)  # k = 3 single-input ops: 2kbn vs 2bn
