"""Multi-LoRA serving: one base weight, many adapters, one batch (docs/framework/engine-multi-lora.md).

A batch mixes tokens of requests that use different adapters (or none). The base product x @ W^T is
one GEMM for all tokens; the low-rank part is two "segmented" products, shrink (x @ A_i^T, d_in -> r)
and expand (v @ B_i^T, r -> d_out), where every segment is the set of tokens of one adapter
(Punica's SGMV; S-LoRA's MBGMM/MBGMV; vLLM's lora_shrink / lora_expand Triton ops).

Tests run the Triton kernel in Triton's CPU interpreter (TRITON_INTERPRET=1, set in tests/conftest.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


# --8<-- [start:segments]
@dataclass
class Segments:
    """Tokens grouped by adapter: token ids sorted by adapter, and per adapter (start, length, id)."""

    token_ids: torch.Tensor  # (T_lora,) int32, indices into the batch's token rows
    starts: torch.Tensor  # (S,) int32
    lengths: torch.Tensor  # (S,) int32
    adapter_ids: torch.Tensor  # (S,) int32, slot of the adapter in the stacked weights
    max_len: int


def make_segments(token_adapter: torch.Tensor) -> Segments:
    """token_adapter[t] = adapter slot of token t, or -1 for the base model only.

    One stable sort by adapter id turns an arbitrary mix into contiguous segments; a decode batch
    (one token per request) and a prefill batch (many tokens per request) go through the same path."""
    order = torch.argsort(token_adapter, stable=True)
    order = order[token_adapter[order] >= 0]  # base-only tokens need no low-rank work
    ids, counts = torch.unique_consecutive(token_adapter[order], return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    return Segments(order.to(torch.int32), starts.to(torch.int32), counts.to(torch.int32),
                    ids.to(torch.int32), int(counts.max()) if len(counts) else 0)
# --8<-- [end:segments]


# --8<-- [start:kernel]
@triton.jit
def sgmv_kernel(x_ptr, w_ptr, out_ptr, tok_ptr, seg_start_ptr, seg_len_ptr, seg_id_ptr, rank_ptr,
                N, K, stride_x, stride_wl, stride_wn, stride_o, scale,
                ACCUMULATE: tl.constexpr, RANK_DIM: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[t, :] (+)= scale * x[t, :] @ W[a]^T for every token t of segment a.

    Grid (row blocks, column blocks, segments). Each program gathers up to BLOCK_M token rows of ONE
    segment, so the weight tile it loads belongs to one adapter: a small GEMM per adapter, all
    adapters in one launch. W is stacked (L, N, K); shrink uses A (L, r, d_in), expand B (L, d_out, r).
    Adapters of different ranks sit zero-padded to the largest rank; RANK_DIM = 1 (shrink: bounds N) or
    2 (expand: bounds K) makes each segment stop at its adapter's own rank, read from rank_ptr."""
    pid_m, pid_n, seg = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(seg_start_ptr + seg)
    length = tl.load(seg_len_ptr + seg)
    adapter = tl.load(seg_id_ptr + seg).to(tl.int64)
    n_lim, k_lim = N, K
    if RANK_DIM == 1:
        n_lim = tl.load(rank_ptr + adapter)
    elif RANK_DIM == 2:
        k_lim = tl.load(rank_ptr + adapter)
    if pid_n * BLOCK_N >= n_lim:
        return  # shrink: a column block wholly past this adapter's rank has nothing to compute
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < length  # programs past the end of a short segment do nothing
    rows = tl.load(tok_ptr + start + offs_m, mask=m_mask, other=0).to(tl.int64)  # the gather
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, k_lim, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rows[:, None] * stride_x + offs_k[None, :],
                    mask=m_mask[:, None] & (offs_k[None, :] < k_lim), other=0.0)
        b = tl.load(w_ptr + adapter * stride_wl + offs_n[None, :] * stride_wn + offs_k[:, None],
                    mask=(offs_k[:, None] < k_lim) & (offs_n[None, :] < n_lim), other=0.0)  # (BLOCK_K, BLOCK_N) of W^T
        acc += tl.dot(a.to(tl.float32), b.to(tl.float32))
    acc = acc * scale
    out = out_ptr + rows[:, None] * stride_o + offs_n[None, :]
    mask = m_mask[:, None] & (offs_n[None, :] < n_lim)
    if ACCUMULATE:
        acc += tl.load(out, mask=mask, other=0.0)
    tl.store(out, acc, mask=mask)


def sgmv(x, w_stacked, seg: Segments, out, scale=1.0, accumulate=False, block=16, ranks=None, rank_dim=0):
    """Launch sgmv_kernel: x (T, K), w_stacked (L, N, K), out (T, N) written only on segment rows.
    ranks (L,) int32 with rank_dim 1 or 2: each adapter stops at its own rank instead of the padded one."""
    n, k = w_stacked.shape[1], w_stacked.shape[2]
    if len(seg.lengths) == 0:
        return out
    grid = (triton.cdiv(seg.max_len, block), triton.cdiv(n, block), len(seg.lengths))
    rank_dim = rank_dim if ranks is not None else 0
    sgmv_kernel[grid](x, w_stacked, out, seg.token_ids, seg.starts, seg.lengths, seg.adapter_ids,
                      ranks if ranks is not None else seg.lengths,
                      n, k, x.stride(0), w_stacked.stride(0), w_stacked.stride(1), out.stride(0), scale,
                      ACCUMULATE=accumulate, RANK_DIM=rank_dim, BLOCK_M=block, BLOCK_N=block, BLOCK_K=block)
    return out


def lora_linear(x, w, a_stacked, b_stacked, token_adapter, scale, ranks=None, block=16):
    """y = x W^T for every token, plus scale * B_a A_a x for tokens with an adapter a.

    Two launches for the low-rank part: shrink to rank r (a small buffer), then expand and add.
    ranks: per-slot ranks when adapters of different ranks are zero-padded into one stack (None: use all)."""
    seg = make_segments(token_adapter)
    y = x @ w.T  # the base GEMM: one for the whole batch, whatever the adapters
    v = torch.zeros(x.shape[0], a_stacked.shape[1], dtype=torch.float32, device=x.device)
    sgmv(x, a_stacked, seg, v, block=block, ranks=ranks, rank_dim=1)  # shrink: (T, d_in) -> (T, r)
    # expand: (T, r) -> (T, d_out), added onto the base GEMM's output
    return sgmv(v, b_stacked, seg, y, scale=scale, accumulate=True, block=block, ranks=ranks, rank_dim=2)
# --8<-- [end:kernel]


# --8<-- [start:reference]
def lora_linear_gathered(x, w, a_stacked, b_stacked, token_adapter, scale):
    """PyTorch reference of the same batch: gather each token's A and B (BGMV) and use batched matmul.
    Slot -1 (no adapter) reads a zero adapter appended at the end."""
    zero_a = torch.zeros_like(a_stacked[:1])
    zero_b = torch.zeros_like(b_stacked[:1])
    a_all, b_all = torch.cat([a_stacked, zero_a]), torch.cat([b_stacked, zero_b])
    idx = torch.where(token_adapter >= 0, token_adapter, len(a_stacked))
    v = torch.bmm(a_all[idx], x[:, :, None])  # (T, r, 1)
    return x @ w.T + scale * torch.bmm(b_all[idx], v)[:, :, 0]


def merged_weight(w, a, b, scale):
    """What a single-adapter deployment serves: W' = W + scale * B A (training-stages.md, 合并)."""
    return w + scale * b @ a
# --8<-- [end:reference]


# --8<-- [start:cost]
def adapter_params(shapes: list[tuple[int, int]], rank: int, layers: int) -> int:
    """Parameters of one adapter: r (d_in + d_out) per adapted (d_in, d_out) linear, per layer."""
    return layers * sum(rank * (d_in + d_out) for d_in, d_out in shapes)


def base_params(shapes: list[tuple[int, int]], layers: int) -> int:
    return layers * sum(d_in * d_out for d_in, d_out in shapes)


def lora_flops_per_token(shapes: list[tuple[int, int]], rank: int, layers: int) -> int:
    """Extra FLOPs per token: shrink 2 r d_in + expand 2 r d_out, i.e. 2 x adapter parameters."""
    return 2 * adapter_params(shapes, rank, layers)


def decode_step_bytes(shapes, rank, layers, distinct_adapters, elem_bytes=2):
    """Weight bytes one decode step reads: the base once, and each DISTINCT adapter in the batch once
    (tokens of the same adapter share its A and B, which is why grouping by adapter matters)."""
    return elem_bytes * (base_params(shapes, layers) + distinct_adapters * adapter_params(shapes, rank, layers))


def llama_linear_shapes(hidden, intermediate, q_heads, kv_heads, head_dim):
    """(d_in, d_out) of q, k, v, o, gate, up, down in one Llama-style decoder layer."""
    q, kv = q_heads * head_dim, kv_heads * head_dim
    return [(hidden, q), (hidden, kv), (hidden, kv), (q, hidden),
            (hidden, intermediate), (hidden, intermediate), (intermediate, hidden)]
# --8<-- [end:cost]


# --8<-- [start:strategies]
def batch_cost(d_in, d_out, tokens, ranks, base_tokens, strategy, elem_bytes=4):
    """(FLOPs, bytes) of one linear layer for one batch: tokens[a] tokens use adapter a (only adapters present
    in the batch are listed), base_tokens use none; ranks[a] for every loaded adapter (padding is to their max).

    FLOPs count the matrix products (2 per multiply-add); bytes count every product reading its operands
    once and writing its result once (expand reads and writes y: it accumulates). Strategies:
      "sgmv":   one base GEMM for all T tokens; shrink + expand per adapter at its own rank;
      "padded": the same kernels with every adapter zero-padded to the largest rank (vLLM's max_lora_rank);
      "merge":  W'_a = W + B_a A_a per adapter (one addmm), then one GEMM per sub-batch, base-only included."""
    t = base_tokens + sum(tokens.values())
    dense = d_in * d_out
    if strategy in ("sgmv", "padded"):
        r = {a: (max(ranks.values()) if strategy == "padded" else ranks[a]) for a in tokens}
        flops = 2 * t * dense + sum(2 * n * r[a] * (d_in + d_out) for a, n in tokens.items())
        base = dense + t * d_in + t * d_out
        shrink = sum(n * d_in + r[a] * d_in + n * r[a] for a, n in tokens.items())
        expand = sum(n * r[a] + r[a] * d_out + 2 * n * d_out for a, n in tokens.items())
        return flops, elem_bytes * (base + shrink + expand)
    if strategy == "merge":
        flops = 2 * t * dense + sum(2 * ranks[a] * dense for a in tokens)
        merge = sum(2 * dense + ranks[a] * (d_in + d_out) for a in tokens)
        groups = list(tokens.values()) + ([base_tokens] if base_tokens else [])
        gemms = sum(dense + n * (d_in + d_out) for n in groups)
        return flops, elem_bytes * (merge + gemms)
    raise ValueError(strategy)


def merge_pays_off_tokens(d_in, d_out):
    """Tokens of one adapter above which merging costs fewer FLOPs than shrink + expand:
    2 r d_in d_out < 2 n r (d_in + d_out)  <=>  n > d_in d_out / (d_in + d_out), whatever the rank."""
    return d_in * d_out / (d_in + d_out)
# --8<-- [end:strategies]
