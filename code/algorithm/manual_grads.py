"""Hand-derived backward passes of the common operators (docs/algorithm/backprop.md).

Every function takes the forward inputs and the upstream gradient gy = dL/dy and returns the
gradients of the inputs, computed without autograd. tests/test_algorithm_backprop.py and
notebooks/algorithm/gradients-lab.ipynb check each one against torch.autograd in float64.
Tensors follow PyTorch layouts: activations (N, C, H, W), linear weights used as Y = X @ W.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


# --8<-- [start:matmul]
def matmul_backward(x, w, gy):
    """Y = X @ W with X (N, K), W (K, M), gy (N, M). Shapes decide the formula."""
    gx = gy @ w.T          # (N, M) @ (M, K) -> (N, K)
    gw = x.T @ gy          # (K, N) @ (N, M) -> (K, M)
    return gx, gw
# --8<-- [end:matmul]


# --8<-- [start:relu]
def relu_backward(x, gy):
    """Y = max(X, 0); the sub-gradient at 0 is taken as 0, as PyTorch does."""
    return gy * (x > 0).to(gy.dtype)
# --8<-- [end:relu]


# --8<-- [start:softmax_ce]
def softmax_cross_entropy_backward(z, target):
    """L = mean_n -log softmax(z_n)[target_n]; z (N, C) logits, target (N,) class ids."""
    n = z.shape[0]
    p = torch.softmax(z, dim=1)
    p[torch.arange(n), target] -= 1.0     # p - onehot(y)
    return p / n                          # the 1/N of the mean


def softmax_backward(y, gy):
    """Softmax alone, y = softmax(z) along the last axis: J = diag(y) - y y^T, so
    gz = J^T gy = y * (gy - <gy, y>)."""
    return y * (gy - (gy * y).sum(dim=-1, keepdim=True))
# --8<-- [end:softmax_ce]


# --8<-- [start:norm]
def _normalize_backward(xhat, rstd, g, dims):
    """Shared core of LayerNorm and BatchNorm: xhat = (x - mean) * rstd over `dims`,
    g = dL/dxhat. dx = rstd * (g - mean(g) - xhat * mean(g * xhat))."""
    return rstd * (g - g.mean(dim=dims, keepdim=True) - xhat * (g * xhat).mean(dim=dims, keepdim=True))


def layernorm_backward(x, gamma, gy, eps=1e-5):
    """LayerNorm over the last axis of x (..., D); gamma (D,). Returns dx, dgamma, dbeta."""
    mean = x.mean(dim=-1, keepdim=True)
    rstd = (x.var(dim=-1, unbiased=False, keepdim=True) + eps).rsqrt()
    xhat = (x - mean) * rstd
    batch_dims = tuple(range(x.dim() - 1))
    dgamma = (gy * xhat).sum(dim=batch_dims)
    dbeta = gy.sum(dim=batch_dims)
    dx = _normalize_backward(xhat, rstd, gy * gamma, dims=-1)
    return dx, dgamma, dbeta


def batchnorm_backward(x, gamma, gy, eps=1e-5):
    """BatchNorm in training mode (batch statistics) for x (N, C) or (N, C, H, W)."""
    dims = (0,) if x.dim() == 2 else (0, 2, 3)
    shape = (1, -1) if x.dim() == 2 else (1, -1, 1, 1)
    mean = x.mean(dim=dims, keepdim=True)
    rstd = (x.var(dim=dims, unbiased=False, keepdim=True) + eps).rsqrt()
    xhat = (x - mean) * rstd
    dgamma = (gy * xhat).sum(dim=dims)
    dbeta = gy.sum(dim=dims)
    dx = _normalize_backward(xhat, rstd, gy * gamma.view(shape), dims=dims)
    return dx, dgamma, dbeta
# --8<-- [end:norm]


# --8<-- [start:conv]
def conv2d_forward(x, w, b, stride=1, padding=0):
    """Convolution as one GEMM: im2col (F.unfold) turns every receptive field into a column."""
    n, _, h, wd = x.shape
    c_out, _, k, _ = w.shape
    cols = F.unfold(x, k, padding=padding, stride=stride)      # (N, C*k*k, L)
    h_out = (h + 2 * padding - k) // stride + 1
    w_out = (wd + 2 * padding - k) // stride + 1
    y = w.reshape(c_out, -1) @ cols + b.view(1, -1, 1)        # (N, C_out, L)
    return y.view(n, c_out, h_out, w_out)


def conv2d_backward(x, w, gy, stride=1, padding=0):
    """Backward of conv2d_forward: the matmul rule on the GEMM, then col2im (F.fold),
    which adds back every column entry into the pixel it was copied from."""
    n, c_in, h, wd = x.shape
    c_out, _, k, _ = w.shape
    cols = F.unfold(x, k, padding=padding, stride=stride)      # (N, C*k*k, L)
    gy_mat = gy.reshape(n, c_out, -1)                          # (N, C_out, L)
    gw = (gy_mat @ cols.transpose(1, 2)).sum(dim=0).view_as(w)  # sum over the batch
    gcols = w.reshape(c_out, -1).T @ gy_mat                    # (N, C*k*k, L)
    gx = F.fold(gcols, (h, wd), k, padding=padding, stride=stride)
    gb = gy.sum(dim=(0, 2, 3))
    return gx, gw, gb
# --8<-- [end:conv]


# --8<-- [start:pool]
def maxpool2d_backward(x, gy, k, stride):
    """The gradient goes only to the arg-max of each window (one of them on ties)."""
    n, c, h, wd = x.shape
    cols = F.unfold(x, k, stride=stride).view(n, c, k * k, -1)   # (N, C, k*k, L)
    idx = cols.argmax(dim=2, keepdim=True)
    gcols = torch.zeros_like(cols).scatter_(2, idx, gy.reshape(n, c, 1, -1))
    return F.fold(gcols.view(n, c * k * k, -1), (h, wd), k, stride=stride)


def avgpool2d_backward(x, gy, k, stride):
    """Every input of a window receives gy / k^2; overlapping windows add up (F.fold)."""
    n, c, h, wd = x.shape
    gcols = (gy.reshape(n, c, 1, -1) / (k * k)).expand(n, c, k * k, gy[0, 0].numel())
    return F.fold(gcols.reshape(n, c * k * k, -1), (h, wd), k, stride=stride)
# --8<-- [end:pool]
