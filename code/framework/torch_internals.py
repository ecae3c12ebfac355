"""PyTorch internals in small, checkable pieces: strides and shared storage, dispatch keys, the autograd
graph, and a custom operator registered with torch.library (fake kernel + autograd formula).
Checked by tests/test_framework_parallel.py; embedded by docs/framework/pytorch-internals.md."""
from __future__ import annotations

import numpy as np
import torch


# --8<-- [start:strides]
def view_facts() -> dict:
    x = torch.arange(12.0).reshape(3, 4)  # one storage of 12 floats, sizes (3, 4), strides (4, 1)
    y = x.t()  # a view: same storage, sizes (4, 3), strides (1, 4): no copy, not contiguous
    z = x[:, 1::2]  # slicing is a view too: offset 1, strides (4, 2)
    return {
        "x_stride": x.stride(), "y_stride": y.stride(), "z_stride": z.stride(), "z_offset": z.storage_offset(),
        "same_storage": y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(),
        "y_contiguous": y.is_contiguous(),
        "copy_on_contiguous": y.contiguous().untyped_storage().data_ptr() != x.untyped_storage().data_ptr(),
    }
# --8<-- [end:strides]


def dispatch_keys(t: torch.Tensor) -> str:
    """The DispatchKeySet the dispatcher reads from a tensor (private API, for illustration)."""
    return str(torch._C._dispatch_keys(t))


# --8<-- [start:custom_op]
@torch.library.custom_op("handbook::np_silu", mutates_args=())
def np_silu(x: torch.Tensor) -> torch.Tensor:
    """An 'opaque' kernel (NumPy, invisible to autograd and to torch.compile's tracer)."""
    a = x.detach().cpu().numpy()
    return torch.from_numpy(a / (1.0 + np.exp(-a))).to(x.device)


@np_silu.register_fake
def _(x):  # shape/dtype propagation only: lets torch.compile and FakeTensor trace through the op
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    s = torch.sigmoid(x)
    return grad * s * (1 + x * (1 - s))  # d/dx x*sigmoid(x)


np_silu.register_autograd(_backward, setup_context=_setup_context)
# --8<-- [end:custom_op]


def autograd_graph(x: torch.Tensor) -> list[str]:
    """Names of the backward nodes from the loss down to the leaf's AccumulateGrad."""
    loss = (x * 2).sin().sum()
    names, node = [], loss.grad_fn
    while node is not None:
        names.append(type(node).__name__)
        nxt = [f for f, _ in node.next_functions if f is not None]
        node = nxt[0] if nxt else None
    return names
