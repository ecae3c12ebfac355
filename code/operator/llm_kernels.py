"""The memory-bound kernels of one LLM step (docs/operator/llm-kernels.md), in Triton, with the
cost formulas the page derives and the references they are checked against.

GEMV at batch 1 (row per program, vectorized, several rows per program, split-K), the dot product,
RoPE in both pair layouts (cos/sin table or computed in the kernel), embedding forward (row gather)
and backward (atomic scatter-add, or sort then one program per segment), activations (erf and tanh
GELU, SiLU, sigmoid, hardswish) and the fused SwiGLU, the merge of two partial attention outputs by
their logsumexp, and NMS as an IoU bitmask followed by a serial scan.

Every kernel computes in fp32 and stores in the output's dtype. In CI they run in Triton's CPU
interpreter (TRITON_INTERPRET=1 must be set before triton is imported); on a GPU the same code
compiles. Checked in tests/test_operator_llm_kernels.py and notebooks/operator/llm-kernels-lab.ipynb.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl


# --8<-- [start:cost]
def gemv_traffic(m, k, elem_bytes=2):
    """y = W x with W (m, k) at batch 1: FLOPs and the bytes that must cross HBM (W once, x, y)."""
    return 2 * m * k, elem_bytes * (m * k + k + m)


def linear_intensity(batch, m, k, elem_bytes=2):
    """FLOP per byte of Y = X W^T for `batch` tokens: W is read once whatever the batch."""
    flops = 2 * batch * m * k
    return flops / (elem_bytes * (m * k + batch * k + batch * m))


def swiglu_traffic(n, elem_bytes=2, fused=True):
    """out = silu(gate) * up over n outputs. Eager: silu reads gate, writes s; mul reads s and up,
    writes out (5n). Fused: reads gate and up, writes out (3n)."""
    return elem_bytes * (3 * n if fused else 5 * n)


def rope_traffic(tokens, heads, head_dim, elem_bytes=2, table=True):
    """Rotate q (tokens, heads, head_dim) once: read and write it; a cos/sin table adds
    2 * head_dim/2 fp32 per token (shared by all heads), computing them in the kernel adds nothing."""
    x = 2 * tokens * heads * head_dim * elem_bytes
    return x + (tokens * head_dim * 4 if table else 0)


def merge_traffic(tokens, heads, head_dim, elem_bytes=2):
    """Merge two partial outputs: read o1, o2 and lse1, lse2 (fp32), write o and lse."""
    return tokens * heads * (3 * head_dim * elem_bytes + 3 * 4)
# --8<-- [end:cost]


def eager_traffic(fn, *args):
    """Run fn and add up, over every aten op it calls, the bytes of the op's tensor inputs and
    outputs: what eager PyTorch moves when every intermediate goes to memory and back. Views
    (chunk, view, expand) move nothing and are not counted."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    views = {"view", "_unsafe_view", "chunk", "split", "slice", "expand", "unsqueeze", "squeeze",
             "transpose", "permute", "t", "select", "alias", "as_strided", "detach", "unbind"}

    class Count(TorchDispatchMode):
        total = 0
        ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in views:
                moved = sum(t.numel() * t.element_size() for t in tree_leaves((args, kwargs, out))
                            if isinstance(t, torch.Tensor))
                Count.total += moved
                Count.ops.append((name, moved))
            return out

    with Count():
        fn(*args)
    return Count.total, Count.ops


def _num_sms(device):
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # CPU interpreter: any small number exercises the same code paths


# --8<-- [start:gemv]
@triton.jit
def gemv_row_kernel(w_ptr, x_ptr, y_ptr, K, stride_w, BLOCK_K: tl.constexpr):
    """One program (launched with one warp) per row: walk the row BLOCK_K elements at a time,
    multiply in fp32, reduce once at the end (the compiler does the warp shuffle)."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs
        w = tl.load(w_ptr + row.to(tl.int64) * stride_w + k, mask=k < K, other=0.0)
        x = tl.load(x_ptr + k, mask=k < K, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


@triton.jit
def gemv_tile_kernel(w_ptr, x_ptr, part_ptr, M, K, stride_w, K_PER_SPLIT,
                     BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """BLOCK_M rows per program, and along K only the slice [pid_k*K_PER_SPLIT, +K_PER_SPLIT).
    With one slice this is 'several rows per program'; with S slices it is split-K: each program
    writes a partial sum part[pid_k, row], and gemv_sum_kernel adds the S partials in a fixed order."""
    pid_m, pid_k = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    k_begin = pid_k * K_PER_SPLIT
    for k0 in range(k_begin, k_begin + K_PER_SPLIT, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        mask = (rows[:, None] < M) & (k[None, :] < K)
        w = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_w + k[None, :], mask=mask, other=0.0)
        x = tl.load(x_ptr + k, mask=k < K, other=0.0)
        acc += w.to(tl.float32) * x[None, :].to(tl.float32)
    tl.store(part_ptr + pid_k * M + rows, tl.sum(acc, axis=1), mask=rows < M)


@triton.jit
def gemv_sum_kernel(part_ptr, y_ptr, M, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    s = tl.arange(0, SPLIT)
    p = tl.load(part_ptr + s[:, None] * M + rows[None, :], mask=rows[None, :] < M, other=0.0)
    tl.store(y_ptr + rows, tl.sum(p, axis=0).to(y_ptr.dtype.element_ty), mask=rows < M)
# --8<-- [end:gemv]


def splitk_factor(m, k, sms, block_m=16, block_k=256, programs_per_sm=4):
    """Slices along K so that about programs_per_sm programs land on every SM (a power of two,
    at most one slice per BLOCK_K chunk of K)."""
    row_programs = triton.cdiv(m, block_m)
    want = max(1, (programs_per_sm * sms) // row_programs)
    most = max(1, triton.cdiv(k, block_k))
    return min(triton.next_power_of_2(want), 1 << (most.bit_length() - 1))


def gemv(w, x, method="vec", out=None, split=None, workspace=None):
    """y = w @ x for w (M, K) contiguous in its last dim. method: 'scalar' (one warp per row, one element
    per thread per step), 'vec' (one warp per row, 16-byte loads), 'tile' (16 rows per program),
    'splitk' (16 rows per program and S slices of K, then a second kernel adds the S partials)."""
    m, k = w.shape
    assert x.shape == (k,) and w.stride(1) == 1 and x.is_contiguous()
    out = torch.empty(m, dtype=w.dtype, device=w.device) if out is None else out
    vec = 16 // w.element_size()  # elements per 16-byte load
    if method in ("scalar", "vec"):
        block_k = 32 if method == "scalar" else 32 * vec
        gemv_row_kernel[(m,)](w, x, out, k, w.stride(0), BLOCK_K=block_k, num_warps=1)
        return out
    block_m, block_k = 16, min(256, max(16, triton.next_power_of_2(k)))
    if method == "tile":
        split = 1
    elif split is None:
        split = splitk_factor(m, k, _num_sms(w.device), block_m, block_k)
    k_per_split = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    split = triton.cdiv(k, k_per_split)  # slices that hold at least one element
    split_p2 = triton.next_power_of_2(split)
    part = workspace if workspace is not None else torch.empty(split_p2 * m, dtype=torch.float32, device=w.device)
    if split_p2 > split:
        part[split * m: split_p2 * m].zero_()
    gemv_tile_kernel[(triton.cdiv(m, block_m), split)](w, x, part, m, k, w.stride(0), k_per_split,
                                                       BLOCK_M=block_m, BLOCK_K=block_k, num_warps=4)
    gemv_sum_kernel[(triton.cdiv(m, 128),)](part, out, m, SPLIT=split_p2, BLOCK_M=128)
    return out


# --8<-- [start:dot]
@triton.jit
def dot_partial_kernel(a_ptr, b_ptr, part_ptr, n, BLOCK: tl.constexpr):
    """Persistent grid: each program strides over the vectors, multiplying as it loads
    (fp16 in, fp32 accumulators, one per lane of the block), and writes one partial sum."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + offs, mask=offs < n, other=0.0)
        b = tl.load(b_ptr + offs, mask=offs < n, other=0.0)
        acc += a.to(tl.float32) * b.to(tl.float32)
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def sum_final_kernel(part_ptr, out_ptr, m, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    total = tl.sum(tl.load(part_ptr + offs, mask=offs < m, other=0.0), axis=0)
    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
# --8<-- [end:dot]


DOT_BLOCK = 2048


def dot_programs(n, device):
    return max(1, min(4 * _num_sms(device), triton.cdiv(n, DOT_BLOCK)))


def dot(a, b, out=None, workspace=None):
    """a . b in fp32 (a one-element tensor of out's dtype, float32 by default); two launches, fixed order."""
    n = a.numel()
    out = torch.empty(1, dtype=torch.float32, device=a.device) if out is None else out
    p = dot_programs(n, a.device)
    part = workspace if workspace is not None else torch.empty(p, dtype=torch.float32, device=a.device)
    dot_partial_kernel[(p,)](a, b, part, n, BLOCK=DOT_BLOCK, num_warps=8)
    sum_final_kernel[(1,)](part, out, p, BLOCK=triton.next_power_of_2(p))
    return out


# --8<-- [start:rope]
@triton.jit
def rope_kernel(x_ptr, out_ptr, pos_ptr, cos_ptr, sin_ptr, inv_freq_ptr, n_heads, stride_t, stride_h,
                HALF: tl.constexpr, HALF_P2: tl.constexpr, BLOCK_H: tl.constexpr,
                INTERLEAVED: tl.constexpr, ON_THE_FLY: tl.constexpr):
    """One program per (token, block of heads). Pair i is rotated by pos * theta_i. The angle's cos/sin
    come from a (max_pos, HALF) fp32 table, or are computed here from the HALF frequencies. Pairs are
    (x[2i], x[2i+1]) when INTERLEAVED (GPT-J), (x[i], x[i+HALF]) otherwise (GPT-NeoX / Hugging Face Llama)."""
    t = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    i = tl.arange(0, HALF_P2)
    pos = tl.load(pos_ptr + t)
    if ON_THE_FLY:
        ang = pos.to(tl.float32) * tl.load(inv_freq_ptr + i, mask=i < HALF, other=0.0)
        c, s = tl.cos(ang), tl.sin(ang)
    else:
        c = tl.load(cos_ptr + pos * HALF + i, mask=i < HALF, other=1.0)
        s = tl.load(sin_ptr + pos * HALF + i, mask=i < HALF, other=0.0)
    c, s = c[None, :], s[None, :]
    row = t.to(tl.int64) * stride_t + heads[:, None] * stride_h
    hmask = heads[:, None] < n_heads
    if INTERLEAVED:  # one contiguous load of the whole head, split into even and odd lanes in registers
        d = tl.arange(0, 2 * HALF_P2)[None, :]
        x = tl.load(x_ptr + row + d, mask=hmask & (d < 2 * HALF), other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (BLOCK_H, HALF_P2, 2)))
        y = tl.reshape(tl.join(x1 * c - x2 * s, x2 * c + x1 * s), (BLOCK_H, 2 * HALF_P2))
        tl.store(out_ptr + row + d, y.to(out_ptr.dtype.element_ty), mask=hmask & (d < 2 * HALF))
    else:  # two contiguous loads: the first and the second half of the head
        m = hmask & (i[None, :] < HALF)
        x1 = tl.load(x_ptr + row + i[None, :], mask=m, other=0.0).to(tl.float32)
        x2 = tl.load(x_ptr + row + HALF + i[None, :], mask=m, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + i[None, :], (x1 * c - x2 * s).to(out_ptr.dtype.element_ty), mask=m)
        tl.store(out_ptr + row + HALF + i[None, :], (x2 * c + x1 * s).to(out_ptr.dtype.element_ty), mask=m)
# --8<-- [end:rope]


def rope_inv_freq(head_dim, theta=10000.0, device="cpu"):
    """theta_i = theta^(-2i/d), in fp32, computed as tiny_transformer.rope_cos_sin does."""
    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)


def rope_table(max_pos, head_dim, theta=10000.0, device="cpu"):
    """cos and sin of pos * theta_i for pos < max_pos: two (max_pos, head_dim/2) fp32 tables."""
    ang = torch.arange(max_pos, dtype=torch.float32, device=device)[:, None] * rope_inv_freq(head_dim, theta, device)
    return ang.cos(), ang.sin()


def rope(x, pos, interleaved=False, table=None, inv_freq=None, out=None):
    """Rotate x (T, H, D) (last dim contiguous) at positions pos (T,). Pass table=(cos, sin) for the
    table variant or inv_freq for the on-the-fly variant."""
    t, h, d = x.shape
    assert x.stride(2) == 1 and d % 2 == 0 and (table is None) != (inv_freq is None)
    out = torch.empty_like(x) if out is None else out
    assert out.stride() == x.stride()
    half = d // 2
    block_h = min(triton.next_power_of_2(h), max(1, 2048 // d))
    cos, sin = table if table is not None else (inv_freq, inv_freq)  # unused pointers in the other variant
    freq = inv_freq if inv_freq is not None else cos
    rope_kernel[(t, triton.cdiv(h, block_h))](x, out, pos, cos, sin, freq, h, x.stride(0), x.stride(1),
                                              HALF=half, HALF_P2=triton.next_power_of_2(half), BLOCK_H=block_h,
                                              INTERLEAVED=interleaved, ON_THE_FLY=inv_freq is not None)
    return out


def rope_reference_interleaved(x, pos, theta=10000.0):
    """GPT-J / original-paper layout, the way Meta's Llama reference code writes it: view the pairs
    (x[2i], x[2i+1]) as complex numbers and multiply by e^{i pos theta_i}."""
    d = x.shape[-1]
    ang = pos.float()[:, None] * rope_inv_freq(d, theta, x.device)             # (T, D/2)
    rot = torch.polar(torch.ones_like(ang), ang)[:, None, :]                   # (T, 1, D/2)
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2))
    return torch.view_as_real(xc * rot).flatten(-2)


# --8<-- [start:embedding]
@triton.jit
def embedding_kernel(idx_ptr, w_ptr, out_ptr, n_tokens, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """Gather: BLOCK_T tokens x BLOCK_D columns per program; each row copy is contiguous."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tok = tl.load(idx_ptr + t, mask=t < n_tokens, other=0).to(tl.int64)
    mask = (t[:, None] < n_tokens) & (d[None, :] < D)
    rows = tl.load(w_ptr + tok[:, None] * D + d[None, :], mask=mask)
    tl.store(out_ptr + t[:, None].to(tl.int64) * D + d[None, :], rows, mask=mask)


@triton.jit
def embedding_bwd_atomic_kernel(idx_ptr, grad_ptr, dw_ptr, D, BLOCK_D: tl.constexpr):
    """Scatter-add: one program per (token, column block); tokens that share a row collide in atomics."""
    t = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tok = tl.load(idx_ptr + t).to(tl.int64)
    g = tl.load(grad_ptr + t.to(tl.int64) * D + d, mask=d < D)
    tl.atomic_add(dw_ptr + tok * D + d, g, mask=d < D)


@triton.jit
def embedding_bwd_segment_kernel(sorted_ptr, perm_ptr, grad_ptr, dw_ptr, n_tokens, D, BLOCK_D: tl.constexpr):
    """After a stable sort of the indices, equal tokens sit next to each other. The program at the
    head of each run sums the run's gradient rows in sorted order and writes its row once: no atomics,
    and the order of the additions is fixed, so the result is the same on every run."""
    t = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tok = tl.load(sorted_ptr + t)
    prev = tl.load(sorted_ptr + t - 1, mask=t > 0, other=-1)
    if (t == 0) | (prev != tok):
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        j = t
        nxt = tok
        while nxt == tok:
            src = tl.load(perm_ptr + j).to(tl.int64)
            acc += tl.load(grad_ptr + src * D + d, mask=d < D, other=0.0).to(tl.float32)
            j += 1
            nxt = tl.load(sorted_ptr + j, mask=j < n_tokens, other=-1)
        tl.store(dw_ptr + tok.to(tl.int64) * D + d, acc.to(dw_ptr.dtype.element_ty), mask=d < D)
# --8<-- [end:embedding]


def embedding(idx, weight, out=None):
    n, d = idx.numel(), weight.shape[1]
    assert weight.is_contiguous()
    out = torch.empty(n, d, dtype=weight.dtype, device=weight.device) if out is None else out
    block_d = min(triton.next_power_of_2(d), 1024)
    block_t = max(1, 4096 // block_d)
    embedding_kernel[(triton.cdiv(n, block_t), triton.cdiv(d, block_d))](idx, weight, out, n, d,
                                                                      BLOCK_T=block_t, BLOCK_D=block_d)
    return out


def embedding_backward(idx, grad, num_rows, method="sorted", out=None):
    """dW (num_rows, D) = sum over tokens t of grad[t] into row idx[t]. method 'atomic' or 'sorted'."""
    n, d = grad.shape
    dw = torch.zeros(num_rows, d, dtype=grad.dtype, device=grad.device) if out is None else out.zero_()
    block_d = min(triton.next_power_of_2(d), 1024)
    grid = (n, triton.cdiv(d, block_d))
    if n == 0:
        return dw
    if method == "atomic":
        embedding_bwd_atomic_kernel[grid](idx, grad, dw, d, BLOCK_D=block_d)
    else:
        sorted_idx, perm = torch.sort(idx, stable=True)
        embedding_bwd_segment_kernel[grid](sorted_idx, perm, grad, dw, n, d, BLOCK_D=block_d)
    return dw


# --8<-- [start:activation]
GELU_ERF, GELU_TANH, SILU, SIGMOID, HARDSWISH = range(5)
ACTIVATIONS = {"gelu": GELU_ERF, "gelu_tanh": GELU_TANH, "silu": SILU, "sigmoid": SIGMOID, "hardswish": HARDSWISH}


@triton.jit
def _sigmoid(x):
    # Overflow-safe: e = e^{-|x|} is in (0, 1], so nothing overflows for any x; 1/(1+e) for x >= 0 and
    # e/(1+e) for x < 0. (e^x / (1 + e^x) gives inf/inf = NaN once e^x overflows: x > 88.7 in fp32,
    # x > 11.1 if computed in fp16.)
    e = tl.exp(-tl.abs(x))
    return tl.where(x >= 0, 1.0, e) / (1.0 + e)


@triton.jit
def activation_kernel(x_ptr, y_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)  # fp16 in, fp32 math
    if ACT == 0:    # GELU: x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif ACT == 1:  # tanh GELU: x/2 * (1 + tanh z) = x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3)
        z = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = x * _sigmoid(2.0 * z)
    elif ACT == 2:  # SiLU (swish): x * sigmoid(x)
        y = x * _sigmoid(x)
    elif ACT == 3:
        y = _sigmoid(x)
    else:           # hardswish: x * relu6(x + 3) / 6
        y = x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=offs < n)


@triton.jit
def swiglu_kernel(g_ptr, u_ptr, y_ptr, n_cols, stride_g, stride_u, BLOCK: tl.constexpr):
    """out = silu(gate) * up in one pass: read gate and up once, write out once (3 tensors, not 5)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    g = tl.load(g_ptr + row * stride_g + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * stride_u + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (g * _sigmoid(g) * u).to(y_ptr.dtype.element_ty), mask=cols < n_cols)
# --8<-- [end:activation]


def activation(x, kind, out=None):
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    n = x.numel()
    activation_kernel[(triton.cdiv(n, 1024),)](x, out, n, ACT=ACTIVATIONS[kind], BLOCK=1024)
    return out


def swiglu(gate, up, out=None):
    """gate, up: (T, F), each with a contiguous last dim (they may be the two halves of one (T, 2F) tensor)."""
    t, f = gate.shape
    assert up.shape == (t, f) and gate.stride(1) == 1 and up.stride(1) == 1
    out = torch.empty(t, f, dtype=gate.dtype, device=gate.device) if out is None else out
    block = min(1024, triton.next_power_of_2(f))
    swiglu_kernel[(t, triton.cdiv(f, block))](gate, up, out, f, gate.stride(0), up.stride(0), BLOCK=block)
    return out


def gelu_tanh_max_gap(lo=-10.0, hi=10.0, points=200_001):
    """max over x of |tanh-GELU(x) - erf-GELU(x)| on a grid, in float64, and where it is reached."""
    x = torch.linspace(lo, hi, points, dtype=torch.float64)
    gap = (torch.nn.functional.gelu(x, approximate="tanh") - torch.nn.functional.gelu(x)).abs()
    i = int(gap.argmax())
    return float(gap[i]), float(x[i])


# --8<-- [start:merge]
@triton.jit
def merge_states_kernel(o1_ptr, lse1_ptr, o2_ptr, lse2_ptr, o_ptr, lse_ptr, D,
                        BLOCK_D: tl.constexpr, WRITE_LSE: tl.constexpr):
    """One program per (token, head): o = (e^{l1} o1 + e^{l2} o2) / (e^{l1} + e^{l2}),
    lse = log(e^{l1} + e^{l2}), both with the larger of l1, l2 factored out so no exp overflows.
    A segment with no keys has lse = -inf and weight 0; if both are empty, o = 0 and lse = -inf."""
    r = tl.program_id(0).to(tl.int64)
    l1 = tl.load(lse1_ptr + r)
    l2 = tl.load(lse2_ptr + r)
    m = tl.maximum(l1, l2)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w1 = tl.exp(l1 - m_safe)          # one of w1, w2 is 1 (unless both segments are empty)
    w2 = tl.exp(l2 - m_safe)
    s = w1 + w2
    s_safe = tl.where(s > 0, s, 1.0)  # both empty: w1 = w2 = 0, so o = 0 without dividing by 0
    d = tl.arange(0, BLOCK_D)
    o1 = tl.load(o1_ptr + r * D + d, mask=d < D, other=0.0).to(tl.float32)
    o2 = tl.load(o2_ptr + r * D + d, mask=d < D, other=0.0).to(tl.float32)
    tl.store(o_ptr + r * D + d, ((w1 / s_safe) * o1 + (w2 / s_safe) * o2).to(o_ptr.dtype.element_ty), mask=d < D)
    if WRITE_LSE:
        tl.store(lse_ptr + r, tl.where(s > 0, m_safe + tl.log(s_safe), float("-inf")))
# --8<-- [end:merge]


def merge_states(o1, lse1, o2, lse2, out=None, out_lse=None):
    """o1, o2: (T, H, D) contiguous; lse1, lse2: (T, H) float32. Returns (o, lse)."""
    t, h, d = o1.shape
    assert o1.is_contiguous() and o2.is_contiguous() and lse1.is_contiguous() and lse2.is_contiguous()
    out = torch.empty_like(o1) if out is None else out
    out_lse = torch.empty_like(lse1) if out_lse is None else out_lse
    merge_states_kernel[(t * h,)](o1, lse1, o2, lse2, out, out_lse, d,
                                  BLOCK_D=triton.next_power_of_2(d), WRITE_LSE=True)
    return out, out_lse


def merge_states_torch(o1, lse1, o2, lse2):
    """The same formula in eager PyTorch (several kernels): the library rung of the lab."""
    lse = torch.logaddexp(lse1, lse2)
    w1 = torch.exp(lse1 - lse).nan_to_num(0.0)[..., None]
    w2 = torch.exp(lse2 - lse).nan_to_num(0.0)[..., None]
    return (w1 * o1.float() + w2 * o2.float()).to(o1.dtype), lse


def attention_with_lse(q, k, v, scale=None):
    """Reference attention of q (T, H, D) over k, v (S, H, D) in float64-free PyTorch: returns the
    normalized output (T, H, D) and the logsumexp of the scaled scores (T, H). S may be 0."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.einsum("thd,shd->ths", q.float(), k.float()) * scale
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("ths,shd->thd", p, v.float()).contiguous(), lse.contiguous()


# --8<-- [start:nms]
@triton.jit
def nms_mask_kernel(boxes_ptr, mask_ptr, n, n_words, threshold, BLOCK: tl.constexpr):
    """Boxes sorted by score. Program (rb, cb) compares 64 rows with 64 columns and writes, for each row
    box i, one 64-bit word whose bit j says 'column box cb*64 + j overlaps i with IoU > threshold and comes
    after it'. Every pair is independent: this is the parallel part."""
    rb, cb = tl.program_id(0), tl.program_id(1)
    i = rb * BLOCK + tl.arange(0, BLOCK)
    j = cb * BLOCK + tl.arange(0, BLOCK)
    ax1 = tl.load(boxes_ptr + 4 * i + 0, mask=i < n, other=0.0)[:, None]
    ay1 = tl.load(boxes_ptr + 4 * i + 1, mask=i < n, other=0.0)[:, None]
    ax2 = tl.load(boxes_ptr + 4 * i + 2, mask=i < n, other=0.0)[:, None]
    ay2 = tl.load(boxes_ptr + 4 * i + 3, mask=i < n, other=0.0)[:, None]
    bx1 = tl.load(boxes_ptr + 4 * j + 0, mask=j < n, other=0.0)[None, :]
    by1 = tl.load(boxes_ptr + 4 * j + 1, mask=j < n, other=0.0)[None, :]
    bx2 = tl.load(boxes_ptr + 4 * j + 2, mask=j < n, other=0.0)[None, :]
    by2 = tl.load(boxes_ptr + 4 * j + 3, mask=j < n, other=0.0)[None, :]
    iw = tl.maximum(tl.minimum(ax2, bx2) - tl.maximum(ax1, bx1), 0.0)
    ih = tl.maximum(tl.minimum(ay2, by2) - tl.maximum(ay1, by1), 0.0)
    inter = iw * ih
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    hit = (inter > threshold * union) & (j[None, :] > i[:, None]) & (j[None, :] < n)
    bit = tl.full([BLOCK], 1, tl.int64) << tl.arange(0, BLOCK).to(tl.int64)
    word = tl.sum(tl.where(hit, bit[None, :], 0), axis=1)  # distinct bits: the sum is the OR
    tl.store(mask_ptr + i.to(tl.int64) * n_words + cb, word, mask=i < n)


@triton.jit
def nms_scan_kernel(mask_ptr, keep_ptr, n, n_words, WORDS: tl.constexpr):
    """The serial part, in one program: walk the boxes in score order with a bitmask of removed boxes;
    a box not yet removed is kept and ORs its row of the mask into the removed set."""
    w = tl.arange(0, WORDS)
    removed = tl.zeros([WORDS], dtype=tl.int64)
    for i in range(0, n):
        word = tl.sum(tl.where(w == i // 64, removed, 0), axis=0)
        gone = (word >> (i % 64)) & 1                      # 1 if box i is already removed
        gone_w = tl.zeros([WORDS], dtype=tl.int64) + gone  # as a vector: a mask must have the load's shape
        row = tl.load(mask_ptr + i * n_words + w, mask=(gone_w == 0) & (w < n_words) & (w >= i // 64), other=0)
        removed = removed | row                            # words before i // 64 are never read again
        tl.store(keep_ptr + i, (gone == 0).to(tl.int8))
# --8<-- [end:nms]


def nms(boxes, scores, iou_threshold):
    """Indices of the kept boxes, in decreasing score order (torchvision.ops.nms's contract). The test
    `inter > t * union` equals `inter / union > t` without the division (and 0/0 boxes are never hits)."""
    n = boxes.shape[0]
    if n == 0:
        return torch.empty(0, dtype=torch.int64, device=boxes.device)
    order = torch.sort(scores, descending=True, stable=True).indices
    b = boxes[order].float().contiguous()
    n_words = triton.cdiv(n, 64)
    mask = torch.empty(n * n_words, dtype=torch.int64, device=boxes.device)
    nms_mask_kernel[(n_words, n_words)](b, mask, n, n_words, float(iou_threshold), BLOCK=64)
    keep = torch.empty(n, dtype=torch.int8, device=boxes.device)
    nms_scan_kernel[(1,)](mask, keep, n, n_words, WORDS=triton.next_power_of_2(n_words))
    return order[keep.bool()]
