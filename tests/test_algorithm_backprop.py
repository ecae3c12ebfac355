"""code/algorithm/manual_grads.py: hand-derived gradients equal torch.autograd's in float64."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("manual_grads", ROOT / "code" / "algorithm" / "manual_grads.py")
mg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mg)

D = torch.float64
TOL = dict(rtol=1e-10, atol=1e-12)   # same math in float64: only rounding differs


def autograd(f, *inputs, gy=None):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    y = f(*leaves)
    y.backward(gy if gy is not None else torch.ones_like(y))
    return [t.grad for t in leaves]


def test_matmul():
    torch.manual_seed(0)
    x, w, gy = torch.randn(5, 3, dtype=D), torch.randn(3, 4, dtype=D), torch.randn(5, 4, dtype=D)
    for mine, ref in zip(mg.matmul_backward(x, w, gy), autograd(torch.matmul, x, w, gy=gy)):
        torch.testing.assert_close(mine, ref, **TOL)


def test_relu():
    torch.manual_seed(1)
    x, gy = torch.randn(7, 5, dtype=D), torch.randn(7, 5, dtype=D)
    torch.testing.assert_close(mg.relu_backward(x, gy), autograd(torch.relu, x, gy=gy)[0], **TOL)


def test_softmax_cross_entropy_is_p_minus_y():
    torch.manual_seed(2)
    z, t = torch.randn(6, 10, dtype=D), torch.randint(0, 10, (6,))
    ref = autograd(lambda a: F.cross_entropy(a, t), z)[0]
    torch.testing.assert_close(mg.softmax_cross_entropy_backward(z, t), ref, **TOL)
    gy = torch.randn(6, 10, dtype=D)
    y = torch.softmax(z, 1)
    torch.testing.assert_close(mg.softmax_backward(y, gy), autograd(lambda a: torch.softmax(a, 1), z, gy=gy)[0], **TOL)


def test_layernorm():
    torch.manual_seed(3)
    x, g, b, gy = torch.randn(4, 3, 8, dtype=D), torch.randn(8, dtype=D), torch.randn(8, dtype=D), torch.randn(4, 3, 8, dtype=D)
    ref = autograd(lambda a, gg, bb: F.layer_norm(a, (8,), gg, bb, 1e-5), x, g, b, gy=gy)
    for mine, r in zip(mg.layernorm_backward(x, g, gy), ref):
        torch.testing.assert_close(mine, r, **TOL)


@pytest.mark.parametrize("shape", [(16, 5), (4, 3, 5, 5)])
def test_batchnorm(shape):
    torch.manual_seed(4)
    c = shape[1]
    x, g, b, gy = torch.randn(shape, dtype=D), torch.randn(c, dtype=D), torch.randn(c, dtype=D), torch.randn(shape, dtype=D)
    ref = autograd(lambda a, gg, bb: F.batch_norm(a, None, None, gg, bb, training=True, eps=1e-5), x, g, b, gy=gy)
    for mine, r in zip(mg.batchnorm_backward(x, g, gy), ref):
        torch.testing.assert_close(mine, r, **TOL)


@pytest.mark.parametrize("stride,padding", [(1, 0), (1, 1), (2, 1)])
def test_conv2d(stride, padding):
    torch.manual_seed(5)
    x, w, b = torch.randn(2, 3, 7, 7, dtype=D), torch.randn(4, 3, 3, 3, dtype=D), torch.randn(4, dtype=D)
    y = mg.conv2d_forward(x, w, b, stride, padding)
    torch.testing.assert_close(y, F.conv2d(x, w, b, stride, padding), **TOL)
    gy = torch.randn_like(y)
    ref = autograd(lambda a, ww, bb: F.conv2d(a, ww, bb, stride, padding), x, w, b, gy=gy)
    mine = mg.conv2d_backward(x, w, gy, stride, padding)
    for m, r in zip(mine, ref):
        torch.testing.assert_close(m, r, **TOL)
    if stride == 1:   # dX is the "full" correlation of dY with the flipped kernel = a transposed conv
        torch.testing.assert_close(mine[0], F.conv_transpose2d(gy, w, padding=padding), **TOL)


@pytest.mark.parametrize("k,stride", [(2, 2), (3, 2), (3, 1)])
def test_pooling(k, stride):
    torch.manual_seed(6)
    x = torch.randn(2, 3, 8, 8, dtype=D)
    gy = torch.randn_like(F.max_pool2d(x, k, stride))
    torch.testing.assert_close(mg.maxpool2d_backward(x, gy, k, stride),
                               autograd(lambda a: F.max_pool2d(a, k, stride), x, gy=gy)[0], **TOL)
    torch.testing.assert_close(mg.avgpool2d_backward(x, gy, k, stride),
                               autograd(lambda a: F.avg_pool2d(a, k, stride), x, gy=gy)[0], **TOL)


def test_finite_differences_agree_for_layernorm():
    """Independent of autograd: central differences of the scalar <gy, y> match dx."""
    torch.manual_seed(7)
    x, g, gy = torch.randn(3, 6, dtype=D), torch.randn(6, dtype=D), torch.randn(3, 6, dtype=D)
    dx = mg.layernorm_backward(x, g, gy)[0]
    h = 1e-6
    fd = torch.zeros_like(x)
    for i in range(x.numel()):
        e = torch.zeros(x.numel(), dtype=D)
        e[i] = h
        e = e.view_as(x)
        f = lambda a: (gy * F.layer_norm(a, (6,), g, None, 1e-5)).sum()
        fd.view(-1)[i] = (f(x + e) - f(x - e)) / (2 * h)
    torch.testing.assert_close(dx, fd, rtol=1e-6, atol=1e-8)   # O(h^2) truncation + rounding/h
