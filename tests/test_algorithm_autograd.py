"""code/algorithm/minigrad.py: every op's gradient equals PyTorch autograd's in float64."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("minigrad", ROOT / "code" / "algorithm" / "minigrad.py")
mg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mg)

TOL = dict(rtol=1e-9, atol=1e-11)   # float64 on both sides; only summation order differs


def check(f_mine, f_torch, *arrays):
    """Reduce the output with fixed random weights r so that every output element matters."""
    rng = np.random.default_rng(0)
    ours = [mg.Tensor(a) for a in arrays]
    out = f_mine(*ours)
    r = rng.standard_normal(out.shape)
    mg.sum_(mg.mul(out, r)).backward()
    refs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_t = f_torch(*refs)
    np.testing.assert_allclose(out.data, out_t.detach().numpy(), **TOL)
    (out_t * torch.tensor(r)).sum().backward()
    for t, rt in zip(ours, refs):
        np.testing.assert_allclose(t.grad, rt.grad.numpy(), **TOL)


rng = np.random.default_rng(42)


def test_add_mul_with_broadcasting():
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((1, 3))
    check(lambda x, y: mg.mul(mg.add(x, y), x), lambda x, y: (x + y) * x, a, b)


def test_matmul_relu_sum():
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    check(lambda x, y: mg.relu(mg.matmul(x, y)), lambda x, y: torch.relu(x @ y), a, b)


def test_log_softmax():
    check(mg.log_softmax, lambda x: torch.log_softmax(x, -1), rng.standard_normal((6, 10)) * 5)


@pytest.mark.parametrize("stride,pad", [(1, 0), (1, 1), (2, 1)])
def test_conv2d(stride, pad):
    x, w, b = rng.standard_normal((2, 3, 7, 7)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    check(lambda *t: mg.conv2d(*t, stride=stride, pad=pad), lambda *t: F.conv2d(*t, stride=stride, padding=pad), x, w, b)


def test_max_pool2d():
    check(lambda x: mg.max_pool2d(x, 2), lambda x: F.max_pool2d(x, 2), rng.standard_normal((2, 3, 6, 8)))


@pytest.mark.parametrize("shape", [(8, 5), (4, 3, 5, 5)])
def test_batchnorm(shape):
    x, g, b = rng.standard_normal(shape), rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    check(mg.batchnorm, lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True, eps=1e-5), x, g, b)


def test_reused_node_accumulates_and_cross_entropy_matches():
    """x feeds two branches (gradient accumulation); loss equals F.cross_entropy."""
    x, w = rng.standard_normal((6, 4)), rng.standard_normal((4, 5))
    labels = rng.integers(0, 5, 6)
    xt, wt = mg.Tensor(x), mg.Tensor(w)
    h = mg.matmul(xt, wt)
    loss = mg.cross_entropy(mg.add(h, mg.relu(h)), labels)
    loss.backward()
    xr, wr = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    hr = xr @ wr
    lr = F.cross_entropy(hr + torch.relu(hr), torch.tensor(labels))
    lr.backward()
    np.testing.assert_allclose(loss.data, lr.item(), **TOL)
    np.testing.assert_allclose(xt.grad, xr.grad.numpy(), **TOL)
    np.testing.assert_allclose(wt.grad, wr.grad.numpy(), **TOL)


def test_small_cnn_step_equals_torch():
    """A conv-BN-ReLU-pool-linear network: one SGD step gives the same weights as torch."""
    x = rng.standard_normal((4, 1, 8, 8))
    labels = rng.integers(0, 3, 4)
    params = [rng.standard_normal(s) * 0.3 for s in [(2, 1, 3, 3), (2,), (2,), (2,), (32, 3)]]
    ours = [mg.Tensor(p) for p in params]
    w, b, g, be, fc = ours
    h = mg.max_pool2d(mg.relu(mg.batchnorm(mg.conv2d(mg.Tensor(x), w, b, pad=1), g, be)), 2)
    mg.cross_entropy(mg.matmul(mg.reshape(h, (4, -1)), fc), labels).backward()
    mg.sgd_step(ours, lr=0.1)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    w, b, g, be, fc = tp
    h = F.max_pool2d(torch.relu(F.batch_norm(F.conv2d(torch.tensor(x), w, b, padding=1), None, None, g, be, training=True)), 2)
    F.cross_entropy(h.reshape(4, -1) @ fc, torch.tensor(labels)).backward()
    opt = torch.optim.SGD(tp, lr=0.1)
    opt.step()
    for o, t in zip(ours, tp):
        np.testing.assert_allclose(o.data, t.detach().numpy(), **TOL)
        assert o.grad is None
