"""A Hopper-oriented Triton FlashAttention forward (docs/operator/flash-attention.md), with the levers
the FA3 paper and Triton's fused-attention tutorial pull on sm_90, each switchable so a sweep can
measure what it buys:

- loads and stores through tensor descriptors, so that on sm_90 they become TMA copies
  (``DESC="host"``: ``triton.tools.tensor_descriptor.TensorDescriptor`` built on the host;
  ``DESC="device"``: ``tl.make_tensor_descriptor`` in the kernel, with ``triton.set_allocator``;
  ``DESC="pointer"``: plain ``tl.load`` of the same tiles, the baseline);
- the causal loop split into an off-diagonal stage without any mask and a diagonal stage with one;
- ``exp2`` with the softmax scale folded into ``log2(e)/sqrt(d)``;
- ``REVERSE``: causal query blocks launched longest first (the last block of a head has the most
  key blocks), so the short ones fill the tail of the wave;
- ``PIPELINE``: a variant of FA3's intra-warpgroup overlap (§3.2), written into the loop: the next block's
  QK^T is issued before this block's softmax, so a GEMM is in flight while exp2 runs (FA3's Algorithm 2
  pairs differently: the softmax of block j+1 runs while the PV GEMM of block j is in flight);
- ``WARP_SPECIALIZE``: ``tl.range(..., warp_specialize=True)`` on the key loop (producer/consumer
  warp groups; whether Triton's sm_90 pipeline accepts it is what the sweep records);
- BLOCK_M, BLOCK_N, num_warps and num_stages from a config, not autotuned.

The layout is [B, H, N, d] contiguous, viewed as a 2-D [B*H*N, d] matrix: the descriptors are 2-D
and a tile never crosses a head because N must be a multiple of BLOCK_M (and BLOCK_M of BLOCK_N).
Returns O and the natural-log logsumexp per row, as the lab's kernel does.

In CI it runs in Triton's CPU interpreter (TRITON_INTERPRET=1 set before triton is imported); on a
GPU the same code compiles. Checked in tests/test_operator_fa_hopper.py, in the lab
notebooks/operator/flash-attention-lab.ipynb, and timed by bench/experiments/fa_forward_sweep.py.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

try:  # host-side TMA descriptors (triton >= 3.3)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older triton
    TensorDescriptor = None

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
DESC_MODES = ("host", "device", "pointer")
LAST_KERNEL = []  # the compiled kernel of the latest launch (on a GPU): registers, spills, shared memory


# --8<-- [start:inner]
@triton.jit
def _fwd_stage(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_m, offs_n, offs_d, lo, hi, qk_scale,
               HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, USE_DESC: tl.constexpr,
               WARP_SPECIALIZE: tl.constexpr):
    """Key/value positions [lo, hi) of one query block. MASKED only for the diagonal block of causal attention."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        rows = kv_row0 + start_n
        if USE_DESC:
            k = desc_k.load([rows, 0]).T  # TMA copy of a [BLOCK_N, d] tile, used transposed
        else:
            k = tl.load(K + (rows + offs_n)[None, :] * HEAD_DIM + offs_d[:, None])  # [d, BLOCK_N]
        qk = tl.dot(q, k)
        if MASKED:  # only the block that straddles the diagonal pays for the comparison
            keep = offs_m[:, None] >= (start_n + offs_n)[None, :]
            qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_new[:, None]
        else:  # scale folded into the max: one FMA per score instead of a multiply and a subtract
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)  # qk_scale already holds log2(e)/sqrt(d)
        alpha = tl.math.exp2(m_i - m_new)
        acc = acc * alpha[:, None]
        if USE_DESC:
            v = desc_v.load([rows, 0])
        else:
            v = tl.load(V + (rows + offs_n)[:, None] * HEAD_DIM + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc)
        l_i = l_i * alpha + tl.sum(p, 1)  # at the end of the body: shorter live range for p's row sum
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _load_kt(desc_k, K, rows, offs_n, offs_d, HEAD_DIM: tl.constexpr, USE_DESC: tl.constexpr):
    if USE_DESC:
        return desc_k.load([rows, 0]).T
    else:
        return tl.load(K + (rows + offs_n)[None, :] * HEAD_DIM + offs_d[:, None])


@triton.jit
def _load_v(desc_v, V, rows, offs_n, offs_d, HEAD_DIM: tl.constexpr, USE_DESC: tl.constexpr):
    if USE_DESC:
        return desc_v.load([rows, 0])
    else:
        return tl.load(V + (rows + offs_n)[:, None] * HEAD_DIM + offs_d[None, :])


@triton.jit
def _softmax_pv(acc, l_i, m_i, qk, v, qk_scale):
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def _pipelined_body(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_n, offs_d, lo, hi, qk_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, USE_DESC: tl.constexpr):
    qk = tl.dot(q, _load_kt(desc_k, K, kv_row0 + lo, offs_n, offs_d, HEAD_DIM, USE_DESC))
    for start_n in tl.range(lo, hi - BLOCK_N, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        qk_next = tl.dot(q, _load_kt(desc_k, K, kv_row0 + start_n + BLOCK_N, offs_n, offs_d, HEAD_DIM, USE_DESC))
        v = _load_v(desc_v, V, kv_row0 + start_n, offs_n, offs_d, HEAD_DIM, USE_DESC)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, qk, v, qk_scale)
        qk = qk_next
    v = _load_v(desc_v, V, kv_row0 + hi - BLOCK_N, offs_n, offs_d, HEAD_DIM, USE_DESC)
    return _softmax_pv(acc, l_i, m_i, qk, v, qk_scale)


@triton.jit
def _fwd_stage_pipelined(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_n, offs_d, lo, hi, qk_scale,
                         HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, USE_DESC: tl.constexpr,
                         MAY_BE_EMPTY: tl.constexpr):
    """Unmasked blocks [lo, hi) with a variant of FA3's intra-warpgroup overlap: S_{j+1} = Q K_{j+1}^T is issued
    before the softmax of S_j, so the tensor cores have a GEMM in flight while the exp2 of the previous block runs.
    MAY_BE_EMPTY (causal, first query block): guard the prologue, which loads one block unconditionally."""
    if MAY_BE_EMPTY:
        if hi > lo:
            acc, l_i, m_i = _pipelined_body(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_n, offs_d, lo, hi,
                                            qk_scale, HEAD_DIM, BLOCK_N, USE_DESC)
    else:
        acc, l_i, m_i = _pipelined_body(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_n, offs_d, lo, hi,
                                        qk_scale, HEAD_DIM, BLOCK_N, USE_DESC)
    return acc, l_i, m_i
# --8<-- [end:inner]


# --8<-- [start:kernel]
@triton.jit
def _maybe_desc(desc_or_ptr, rows, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, DESC: tl.constexpr):
    """DESC == 2: build the descriptor on the device (needs triton.set_allocator); 1: it came from the host."""
    if DESC == 2:
        return tl.make_tensor_descriptor(desc_or_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK, HEAD_DIM])
    else:
        return desc_or_ptr


@triton.jit
def flash_fwd_hopper_kernel(desc_q, desc_k, desc_v, desc_o, Q, K, V, O, LSE, sm_scale, BH, N_CTX,
                            HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, DESC: tl.constexpr, REVERSE: tl.constexpr,
                            WARP_SPECIALIZE: tl.constexpr, PIPELINE: tl.constexpr):
    """DESC: 0 pointer loads, 1 host descriptors (desc_* are TensorDescriptors), 2 device descriptors
    (desc_* are the raw pointers). Q, K, V, O are the raw pointers in every mode (the pointer path uses them)."""
    if REVERSE:  # longest causal query blocks first
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    bh = tl.program_id(1)
    rows = BH * N_CTX
    USE_DESC: tl.constexpr = DESC != 0
    if USE_DESC:
        desc_q = _maybe_desc(desc_q, rows, HEAD_DIM, BLOCK_M, DESC)
        desc_k = _maybe_desc(desc_k, rows, HEAD_DIM, BLOCK_N, DESC)
        desc_v = _maybe_desc(desc_v, rows, HEAD_DIM, BLOCK_N, DESC)
        desc_o = _maybe_desc(desc_o, rows, HEAD_DIM, BLOCK_M, DESC)
    kv_row0 = bh * N_CTX  # first row of this head in the [B*H*N, d] view
    q_row0 = kv_row0 + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # log2(e)/sqrt(d): exp2 instead of exp
    if USE_DESC:
        q = desc_q.load([q_row0, 0])  # the Q tile stays on chip for the whole loop
    else:
        q = tl.load(Q + (q_row0 + tl.arange(0, BLOCK_M))[:, None] * HEAD_DIM + offs_d[None, :])
    if CAUSAL and WARP_SPECIALIZE:
        # Triton's sm_90 warp-specialisation pass rejects a kernel with two loops after each other (the pass
        # fails a dominance check): one masked loop over every block up to the diagonal instead, paying a
        # compare and a select per score to get the producer/consumer split
        acc, l_i, m_i = _fwd_stage(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_m, offs_n, offs_d,
                                   0, (start_m + 1) * BLOCK_M, qk_scale, HEAD_DIM, BLOCK_N, True, USE_DESC, True)
    else:
        # stage 1 (causal: the blocks wholly below the diagonal; otherwise all of them) needs no mask
        if CAUSAL:
            unmasked_hi = start_m * BLOCK_M
        else:
            unmasked_hi = N_CTX
        if PIPELINE:
            acc, l_i, m_i = _fwd_stage_pipelined(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_n, offs_d,
                                                 0, unmasked_hi, qk_scale, HEAD_DIM, BLOCK_N, USE_DESC, CAUSAL)
        else:
            acc, l_i, m_i = _fwd_stage(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_m, offs_n, offs_d,
                                       0, unmasked_hi, qk_scale, HEAD_DIM, BLOCK_N, False, USE_DESC, WARP_SPECIALIZE)
        if CAUSAL:  # stage 2: the diagonal block, masked
            acc, l_i, m_i = _fwd_stage(acc, l_i, m_i, q, desc_k, desc_v, K, V, kv_row0, offs_m, offs_n, offs_d,
                                       start_m * BLOCK_M, (start_m + 1) * BLOCK_M, qk_scale, HEAD_DIM, BLOCK_N,
                                       True, USE_DESC, False)
    acc = acc / l_i[:, None]  # normalise once, at the end
    tl.store(LSE + bh * N_CTX + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453)  # natural-log L
    out = acc.to(Q.dtype.element_ty)
    if USE_DESC:
        desc_o.store([q_row0, 0], out)  # TMA store
    else:
        tl.store(O + (q_row0 + tl.arange(0, BLOCK_M))[:, None] * HEAD_DIM + offs_d[None, :], out)
# --8<-- [end:kernel]


def _allocator(device):
    """Global scratch for device-side descriptors (triton.set_allocator): a byte tensor on q's device."""
    def alloc(size, alignment, stream):
        return torch.empty(size, dtype=torch.int8, device=device)
    return alloc


# --8<-- [start:launch]
def flash_attention_hopper(q, k, v, causal, block_m=128, block_n=64, num_warps=4, num_stages=3, desc="host",
                           reverse=False, warp_specialize=False, pipeline=False, out=None, lse=None):
    """q, k, v: [B, H, N, d] contiguous fp16/bf16, N a multiple of block_m, block_m a multiple of block_n.
    Returns (O, logsumexp). desc: "host" / "device" tensor descriptors (TMA on sm_90) or "pointer" loads;
    pipeline: issue the next block's QK^T before this block's softmax (after FA3 §3.2), unmasked blocks only."""
    B, H, N, D = q.shape
    assert desc in DESC_MODES, desc
    assert q.shape == k.shape == v.shape and all(t.is_contiguous() for t in (q, k, v)), "need contiguous [B,H,N,d]"
    assert D in (16, 32, 64, 128, 256) and N % block_m == 0 and block_m % block_n == 0, (N, block_m, block_n)
    o = torch.empty_like(q) if out is None else out
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32) if lse is None else lse
    rows = B * H * N
    q2, k2, v2, o2 = (t.view(rows, D) for t in (q, k, v, o))
    if desc == "host":
        assert TensorDescriptor is not None, "this triton has no triton.tools.tensor_descriptor"
        descs = [TensorDescriptor(t, shape=[rows, D], strides=[D, 1], block_shape=[bs, D])
                 for t, bs in ((q2, block_m), (k2, block_n), (v2, block_n), (o2, block_m))]
        mode = 1
    elif desc == "device":
        triton.set_allocator(_allocator(q.device))
        descs, mode = [q2, k2, v2, o2], 2
    else:
        descs, mode = [q2, k2, v2, o2], 0
    grid = (N // block_m, B * H)
    kernel = flash_fwd_hopper_kernel[grid](*descs, q2, k2, v2, o2, lse, 1.0 / math.sqrt(D), B * H, N,
                                  HEAD_DIM=D, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, DESC=mode,
                                  REVERSE=reverse, WARP_SPECIALIZE=warp_specialize, PIPELINE=pipeline,
                                  num_warps=num_warps, num_stages=num_stages)
    LAST_KERNEL[:] = [kernel]
    return o, lse
# --8<-- [end:launch]


def shared_memory_bytes(block_m, block_n, head_dim, num_stages, elem_bytes=2):
    """An estimate of the shared memory of one program: the Q tile, the O tile staged for the TMA store, and
    num_stages - 1 buffers each of K and V (the software pipeline keeps that many loads in flight). It matches
    what Triton 3.9 allocates for BLOCK_N = 64 on sm_90 (compiled ahead of time); with BLOCK_N = 128 the
    compiler adds one more Q-sized buffer. H100/H200 allow at most 227 KiB per block; the compiled kernel's
    metadata.shared, recorded by bench/experiments/fa_forward_sweep.py, is the real figure, and a config over
    the limit fails with OutOfResources."""
    return elem_bytes * head_dim * (2 * block_m + 2 * (num_stages - 1) * block_n)
