"""A reverse-mode automatic differentiation engine on NumPy, small enough to read in one sitting.

docs/algorithm/autograd.md embeds it; tests/test_algorithm_autograd.py checks every op's gradient
against PyTorch; notebooks/algorithm/autograd-lab.ipynb trains an MLP and a CNN with it.
Each op computes its output and records a closure that maps the output's gradient to its
inputs' gradients; backward() runs those closures in reverse topological order.
"""
from __future__ import annotations

import numpy as np


# --8<-- [start:tensor]
class Tensor:
    def __init__(self, data, parents=(), op=""):
        self.data = np.array(data, dtype=np.float64)   # a copy: updates never alias the caller
        self.grad = None                 # dL/dself, same shape as data, filled by backward()
        self.parents = parents           # the Tensors this one was computed from
        self.op = op
        self._backward = lambda g: ()    # g = dL/dself -> one gradient per parent

    @property
    def shape(self):
        return self.data.shape

    def backward(self):
        # 1. Topological order by depth-first search: a node comes after everything it uses.
        order, seen = [], set()

        def visit(t):
            if id(t) not in seen:
                seen.add(id(t))
                for p in t.parents:
                    visit(p)
                order.append(t)
        visit(self)
        # 2. Seed dL/dL = 1 and walk the order backwards; each node's gradient is complete
        #    (all its consumers have added their share) before it is passed on.
        grads = {id(self): np.ones_like(self.data)}
        for t in reversed(order):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if not t.parents:            # a leaf: accumulate, as PyTorch's .grad does
                t.grad = g if t.grad is None else t.grad + g
                continue
            for p, gp in zip(t.parents, t._backward(g)):
                grads[id(p)] = grads[id(p)] + gp if id(p) in grads else gp
# --8<-- [end:tensor]


def _unbroadcast(g, shape):
    """Sum a gradient over the axes that broadcasting expanded, back to `shape`."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, n in enumerate(shape):
        if n == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g


def _lift(x):
    return x if isinstance(x, Tensor) else Tensor(x)


# --8<-- [start:basic]
def add(a, b):
    a, b = _lift(a), _lift(b)
    out = Tensor(a.data + b.data, (a, b), "add")
    out._backward = lambda g: (_unbroadcast(g, a.shape), _unbroadcast(g, b.shape))
    return out


def mul(a, b):
    a, b = _lift(a), _lift(b)
    out = Tensor(a.data * b.data, (a, b), "mul")
    out._backward = lambda g: (_unbroadcast(g * b.data, a.shape), _unbroadcast(g * a.data, b.shape))
    return out


def matmul(a, b):
    out = Tensor(a.data @ b.data, (a, b), "matmul")
    out._backward = lambda g: (g @ b.data.T, a.data.T @ g)
    return out


def relu(a):
    out = Tensor(np.maximum(a.data, 0.0), (a,), "relu")
    out._backward = lambda g: (g * (a.data > 0),)
    return out


def sum_(a):
    out = Tensor(a.data.sum(), (a,), "sum")
    out._backward = lambda g: (np.broadcast_to(g, a.shape).copy(),)
    return out


def reshape(a, shape):
    out = Tensor(a.data.reshape(shape), (a,), "reshape")
    out._backward = lambda g: (g.reshape(a.shape),)
    return out


def log_softmax(a):
    """Along the last axis. d/dz of y = z - logsumexp(z): g - softmax(z) * sum(g)."""
    z = a.data - a.data.max(axis=-1, keepdims=True)
    y = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    out = Tensor(y, (a,), "log_softmax")
    out._backward = lambda g: (g - np.exp(y) * g.sum(axis=-1, keepdims=True),)
    return out
# --8<-- [end:basic]


# --8<-- [start:conv]
def _im2col(x, k, stride, pad):
    """(N, C, H, W) -> (N, C, k, k, Ho, Wo): cols[..., i, j, :, :] is the input seen by tap (i, j)."""
    n, c, h, w = x.shape
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, c, k, k, ho, wo))
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
    return cols


def _col2im(cols, x_shape, k, stride, pad):
    """Adjoint of _im2col: add every column entry back into the pixel it was copied from."""
    n, c, h, w = x_shape
    ho, wo = cols.shape[-2:]
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad))
    for i in range(k):
        for j in range(k):
            xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride] += cols[:, :, i, j]
    return xp[:, :, pad:pad + h, pad:pad + w]


def conv2d(x, w, b, stride=1, pad=0):
    """x (N, C, H, W), w (O, C, k, k), b (O,) -> (N, O, Ho, Wo) as one contraction over (C, k, k)."""
    k = w.shape[-1]
    cols = _im2col(x.data, k, stride, pad)
    y = np.einsum("nckluv,ockl->nouv", cols, w.data, optimize=True) + b.data[None, :, None, None]
    out = Tensor(y, (x, w, b), "conv2d")

    def backward(g):
        gw = np.einsum("nouv,nckluv->ockl", g, cols, optimize=True)
        gcols = np.einsum("nouv,ockl->nckluv", g, w.data, optimize=True)
        return _col2im(gcols, x.shape, k, stride, pad), gw, g.sum(axis=(0, 2, 3))
    out._backward = backward
    return out


def max_pool2d(x, k):
    """Non-overlapping k x k windows (stride k); H and W divisible by k."""
    n, c, h, w = x.shape
    win = x.data.reshape(n, c, h // k, k, w // k, k).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // k, w // k, k * k)
    idx = win.argmax(axis=-1)[..., None]               # first maximum, as PyTorch picks one
    out = Tensor(np.take_along_axis(win, idx, -1)[..., 0], (x,), "max_pool2d")

    def backward(g):
        gwin = np.zeros_like(win)
        np.put_along_axis(gwin, idx, g[..., None], -1)
        gx = gwin.reshape(n, c, h // k, w // k, k, k).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)
        return (gx,)
    out._backward = backward
    return out


def batchnorm(x, gamma, beta, eps=1e-5):
    """Training-mode BatchNorm over every axis but 1 (channels), for (N, C) or (N, C, H, W)."""
    axes = (0,) if x.data.ndim == 2 else (0, 2, 3)
    shape = [1] * x.data.ndim
    shape[1] = -1
    mean = x.data.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(x.data.var(axis=axes, keepdims=True) + eps)
    xhat = (x.data - mean) * rstd
    out = Tensor(gamma.data.reshape(shape) * xhat + beta.data.reshape(shape), (x, gamma, beta), "batchnorm")

    def backward(g):
        gx_hat = g * gamma.data.reshape(shape)
        gx = rstd * (gx_hat - gx_hat.mean(axis=axes, keepdims=True)
                     - xhat * (gx_hat * xhat).mean(axis=axes, keepdims=True))
        return gx, (g * xhat).sum(axis=axes), g.sum(axis=axes)
    out._backward = backward
    return out
# --8<-- [end:conv]


# --8<-- [start:loss]
def cross_entropy(logits, labels):
    """Mean negative log-likelihood, built from the ops above so the engine derives its gradient."""
    n, c = logits.shape
    onehot = np.eye(c)[labels]
    return mul(sum_(mul(log_softmax(logits), onehot)), -1.0 / n)


def sgd_step(params, lr):
    for p in params:
        p.data -= lr * p.grad
        p.grad = None                    # gradients accumulate, so clear them every step
# --8<-- [end:loss]
