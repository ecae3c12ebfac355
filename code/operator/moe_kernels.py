"""The operators of an MoE layer (docs/operator/moe-kernels.md): permute tokens by expert, a grouped GEMM
over variable per-expert row counts in one launch, and the fused MoE forward built from them.

Routing (top-k over the router's softmax) gives every token k (expert, weight) pairs, k * T "slots" in all.
`permute` sorts the slots by expert (stable argsort + bincount -> offsets) and returns the inverse
permutation that puts results back. `align_block_size` is vLLM's moe_align_block_size scheme: pad every
expert's rows to a multiple of BLOCK_M, one expert id per row block, so one Triton launch covers all experts
and reads each token's row through the sorted slot index (no permuted copy of the activations). The
`fused_moe` forward: gate_up grouped GEMM, SiLU(gate) * up, down grouped GEMM scaled by the routing weight and
written back to the slot's own position, then a sum over the k slots of each token (= unpermute + combine).

The kernels accumulate in fp32 and store in the output's dtype. In CI they run in Triton's CPU interpreter
(TRITON_INTERPRET=1 must be set before triton is imported). Checked in tests/test_operator_moe_kernels.py and
notebooks/operator/moe-kernels-lab.ipynb.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


# --8<-- [start:route]
def topk_route(logits, k, renormalize=False):
    """Router: softmax over experts, keep the top k. Returns weights (T, k) fp32 and expert ids (T, k) int32."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    if renormalize:  # Mixtral renormalises the k weights; DeepSeek-V2-Lite does not
        weights = weights / weights.sum(-1, keepdim=True)
    return weights, ids.to(torch.int32)


def balanced_ids(tokens, experts, k, gen):
    """Every expert gets exactly tokens*k/experts slots (when divisible); tokens are shuffled so the gather is random."""
    dev = gen.device
    ids = (torch.arange(tokens * k, device=dev) % experts).view(tokens, k)
    return ids[torch.randperm(tokens, device=dev, generator=gen)].to(torch.int32)


def zipf_ids(tokens, experts, k, gen, s=0.5):
    """k distinct experts per token, drawn without replacement; each draw weights expert e by (e+1)^-s (a skewed router)."""
    dev = gen.device
    p = torch.arange(1, experts + 1, device=dev, dtype=torch.float64) ** -s
    return torch.multinomial(p.float().expand(tokens, experts), k, replacement=False, generator=gen).to(torch.int32)
# --8<-- [end:route]


# --8<-- [start:permute]
def permute(topk_ids, experts):
    """Slots sorted by expert. Slot s = t*k + j is token t's j-th choice.
    order[i]: the slot at sorted position i (stable: within an expert, token order is kept);
    counts[e] = n_e; offsets[e]..offsets[e+1]: expert e's rows; inverse[s]: the sorted position of slot s."""
    flat = topk_ids.flatten().long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    offsets = F.pad(torch.cumsum(counts, 0), (1, 0))
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    return order, counts, offsets, inverse


def permute_rows(x, order, k):
    """The permuted copy of the activations: row i is token order[i] // k (each token appears k times)."""
    return x[order // k]


def unpermute(y_sorted, inverse, topk_weights):
    """Back to slot order with the inverse permutation, scale by the routing weight, sum each token's k slots.
    A gather plus a fixed-order sum: deterministic, unlike an atomic scatter-add (index_add_) on a GPU."""
    tokens, k = topk_weights.shape
    y = y_sorted[inverse].view(tokens, k, -1)
    return (y * topk_weights[..., None].to(y.dtype)).sum(1)
# --8<-- [end:permute]


# --8<-- [start:align]
def align_block_size(topk_ids, experts, block_m):
    """vLLM's moe_align_block_size, in PyTorch ops that stay on the device (no host sync).
    sorted_ids: slots grouped by expert, each expert padded to a multiple of block_m with the sentinel T*k;
    block_expert[b]: the expert of row block b (-1 past the end); total: padded row count, a 1-element tensor.
    sorted_ids has the static length T*k + E*(block_m-1) rounded up to block_m, so the grid is known on the host."""
    flat = topk_ids.flatten().long()
    numel, dev = flat.numel(), flat.device
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    order = torch.argsort(flat, stable=True)
    e_sorted = flat[order]
    rank = torch.arange(numel, device=dev) - (torch.cumsum(counts, 0) - counts)[e_sorted]  # position inside its expert
    capacity = triton.cdiv(numel + experts * (block_m - 1), block_m) * block_m
    sorted_ids = torch.full((capacity,), numel, dtype=torch.int32, device=dev)
    sorted_ids[(padded_end - padded)[e_sorted] + rank] = order.to(torch.int32)
    block_start = torch.arange(0, capacity, block_m, device=dev)
    block_expert = torch.searchsorted(padded_end, block_start, right=True)
    total = padded_end[-1:]
    block_expert = torch.where(block_start < total, block_expert, -1).to(torch.int32)
    return sorted_ids, block_expert, total.to(torch.int32), counts


def padding_waste(counts, block_m):
    """Rows computed on the sentinel: sum_e ceil(n_e/BLOCK_M)*BLOCK_M - sum_e n_e."""
    return int(((counts + block_m - 1) // block_m * block_m).sum() - counts.sum())
# --8<-- [end:align]


# --8<-- [start:grouped]
@triton.jit
def _grouped_gemm_kernel(a_ptr, b_ptr, c_ptr, w_ptr, sorted_ids_ptr, block_expert_ptr, total_ptr,
                         N, K, num_slots, capacity,
                         stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
                         A_DIV: tl.constexpr, MUL_WEIGHT: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # C[slot] = A[slot // A_DIV] @ B[expert]^T (* weight[slot]), one row block of one expert per program
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(capacity, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n  # GROUP_M row blocks share the B tiles they read (L2 reuse)
    first_m = (pid // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    if pid_m * BLOCK_M >= tl.load(total_ptr):  # the grid was sized for the worst case: blocks past the end exit
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    slot = tl.load(sorted_ids_ptr + offs_m)
    valid = slot < num_slots  # padding rows hold the sentinel num_slots
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    rows = (slot // A_DIV).to(tl.int64)  # gather A's rows through the sorted index: no permuted copy
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        k_ok = offs_k < K - kb * BLOCK_K
        a = tl.load(a_ptrs, mask=valid[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if MUL_WEIGHT:
        acc = acc * tl.load(w_ptr + slot, mask=valid, other=0.0)[:, None]
    c_ptrs = c_ptr + slot.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & (offs_n[None, :] < N))


def pick_blocks(tokens, experts, k):
    """Tile sizes in the spirit of vLLM's defaults (vLLM switches on T <= E, this on <= 32 rows per expert on average):
    small BLOCK_M when each expert gets few rows (decode), else 64."""
    if tokens * k <= 32 * experts:
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, GROUP_M=1)
    return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8)


def grouped_gemm(a, w, out, sorted_ids, block_expert, total, a_div, weights=None, blocks=None):
    """out[slot] = a[slot // a_div] @ w[expert(slot)]^T for every slot, in ONE launch. w: (E, N, K) like nn.Linear.
    out has one row per slot (T*k rows) in slot order; weights (T*k,) multiplies each row when given."""
    num_slots = out.shape[0]
    n, kdim = w.shape[1], w.shape[2]
    cfg = dict(blocks or dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=1))
    capacity = sorted_ids.numel()
    assert capacity % cfg["BLOCK_M"] == 0 and block_expert.numel() == capacity // cfg["BLOCK_M"]
    grid = (triton.cdiv(capacity, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _grouped_gemm_kernel[grid](
        a, w, out, weights if weights is not None else out, sorted_ids, block_expert, total,
        n, kdim, num_slots, capacity,
        a.stride(0), a.stride(1), w.stride(0), w.stride(1), w.stride(2), out.stride(0), out.stride(1),
        A_DIV=a_div, MUL_WEIGHT=weights is not None, **cfg)
    return out
# --8<-- [end:grouped]


# --8<-- [start:fused]
@triton.jit
def _silu_mul_kernel(h_ptr, out_ptr, F_DIM, stride_h, stride_o, BLOCK: tl.constexpr):
    # out[r, :] = silu(h[r, :F]) * h[r, F:], computed in fp32, one row block per program
    r = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < F_DIM
    g = tl.load(h_ptr + r * stride_h + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(h_ptr + r * stride_h + F_DIM + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + r * stride_o + cols, (g * tl.sigmoid(g) * u).to(out_ptr.dtype.element_ty), mask=m)


def silu_mul(h, out=None):
    rows, two_f = h.shape
    f = two_f // 2
    out = torch.empty(rows, f, dtype=h.dtype, device=h.device) if out is None else out
    block = min(1024, triton.next_power_of_2(f))
    _silu_mul_kernel[(rows, triton.cdiv(f, block))](h, out, f, h.stride(0), out.stride(0), BLOCK=block)
    return out


def fused_moe(x, w13, w2, topk_weights, topk_ids, blocks=None, align=None):
    """MoE expert forward: x (T, d), w13 (E, 2f, d) = [gate; up], w2 (E, d, f); returns (T, d).
    Three launches plus a sum: gate_up grouped GEMM (rows gathered from x), SiLU(gate)*up,
    down grouped GEMM scaled by the routing weight, written at each slot's own row; sum over k = unpermute."""
    tokens, d = x.shape
    experts, k = w13.shape[0], topk_ids.shape[1]
    cfg = blocks or pick_blocks(tokens, experts, k)
    sorted_ids, block_expert, total, _ = align or align_block_size(topk_ids, experts, cfg["BLOCK_M"])
    h = torch.empty(tokens * k, w13.shape[1], dtype=x.dtype, device=x.device)
    grouped_gemm(x, w13, h, sorted_ids, block_expert, total, a_div=k, blocks=cfg)
    act = silu_mul(h)
    y = torch.empty(tokens * k, d, dtype=x.dtype, device=x.device)
    grouped_gemm(act, w2, y, sorted_ids, block_expert, total, a_div=1,
                 weights=topk_weights.flatten().float().contiguous(), blocks=cfg)
    return y.view(tokens, k, d).sum(1)  # the slots of a token are adjacent: a fixed-order sum, no atomics
# --8<-- [end:fused]


# --8<-- [start:baselines]
def moe_grouped_mm(x, w13, w2, topk_weights, topk_ids):
    """The same forward with torch._grouped_mm (offs = cumulative end row of each expert, int32, on the device):
    needs the permuted copy of x; bf16 on sm_90/sm_100 takes the CUTLASS kernel, anything else loops mm per group."""
    experts, f = w13.shape[0], w2.shape[2]
    order, counts, _, inverse = permute(topk_ids, experts)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = permute_rows(x, order, topk_ids.shape[1])
    h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
    act = F.silu(h[:, :f]) * h[:, f:]
    y = torch._grouped_mm(act, w2.transpose(1, 2), offs=offs)
    return unpermute(y, inverse, topk_weights)


def moe_padded_bmm(x, w13, w2, topk_weights, topk_ids):
    """Pad every expert to max n_e and use one torch.bmm per projection: E * max(n_e) rows are computed."""
    experts, f, k = w13.shape[0], w2.shape[2], topk_ids.shape[1]
    order, counts, offsets, inverse = permute(topk_ids, experts)
    cap = int(counts.max())  # a host sync: the padded shape depends on the data
    e_sorted = topk_ids.flatten().long()[order]
    rank = torch.arange(order.numel(), device=x.device) - offsets[e_sorted]
    xp = x.new_zeros(experts, cap, x.shape[1])
    xp[e_sorted, rank] = permute_rows(x, order, k)
    h = torch.bmm(xp, w13.transpose(1, 2))
    y = torch.bmm(F.silu(h[..., :f]) * h[..., f:], w2.transpose(1, 2))
    return unpermute(y[e_sorted, rank], inverse, topk_weights)


def moe_expert_loop(x, w13, w2, topk_weights, topk_ids):
    """One mm per expert on its slice of the permuted rows: E small launches and a host sync for the counts."""
    experts, f, k = w13.shape[0], w2.shape[2], topk_ids.shape[1]
    order, counts, offsets, inverse = permute(topk_ids, experts)
    xs = permute_rows(x, order, k)
    y = torch.empty_like(xs)
    bounds = offsets.tolist()
    for e in range(experts):
        lo, hi = bounds[e], bounds[e + 1]
        if hi > lo:
            h = xs[lo:hi] @ w13[e].T
            y[lo:hi] = (F.silu(h[:, :f]) * h[:, f:]) @ w2[e].T
    return unpermute(y, inverse, topk_weights)
# --8<-- [end:baselines]


# --8<-- [start:reference]
def moe_reference(x, w13, w2, topk_weights, topk_ids):
    """float64 reference MoE layer, one expert at a time, plus the magnitudes the error bound needs:
    abs_h[s] = |x_t| @ |W13_e|^T, abs_y[s] = |a_s| @ |W2_e|^T (per slot), the activations a and the up half."""
    tokens, d = x.shape
    experts, f, k = w13.shape[0], w2.shape[2], topk_ids.shape[1]
    xd, ids = x.double(), topk_ids.long()
    out = torch.zeros(tokens, d, dtype=torch.float64, device=x.device)
    parts = {}
    for e in range(experts):
        tok, j = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        w1e, w2e = w13[e].double(), w2[e].double()
        h = xd[tok] @ w1e.T
        gate, up = h[:, :f], h[:, f:]
        a = F.silu(gate) * up
        y = a @ w2e.T
        out.index_add_(0, tok, y * topk_weights[tok, j, None].double())
        parts[e] = (tok, j, xd[tok].abs() @ w1e.abs().T, gate, up, a, a.abs() @ w2e.abs().T, w2e.abs())
    return out, parts


def moe_error_bound(parts, topk_weights, tokens, d, f, u_acc, u_store, roundings=1):
    """Forward error bound of a MoE forward that accumulates dot products with unit roundoff u_acc and stores
    h, SiLU(g)*u, y and the output with unit roundoff u_store (`roundings` stores per intermediate):
    |dh| <= (gamma_d + r u_s) |x||W13|^T; |da| <= L |dg| |up| + |silu g| |du| + r u_s |a| (L = max|silu'| < 1.1);
    |dy| <= (gamma_f + r u_s) |a||W2|^T + |da||W2|^T; the output adds sum_j w_j |dy_j| and k stores."""
    gamma = lambda n: n * u_acc / (1 - n * u_acc)  # noqa: E731
    bound = torch.zeros(tokens, d, dtype=torch.float64, device=topk_weights.device)
    r = roundings
    for tok, j, abs_h, gate, up, a, abs_y, w2_abs in parts.values():
        dh = (gamma(d) + r * u_store) * abs_h
        dg, du = dh[:, :f], dh[:, f:]
        # the last term: SiLU(g)*u evaluated in fp32 (exp, divide, two multiplies: a few u_acc) and r stores
        da = 1.1 * dg * up.abs() + F.silu(gate).abs() * du + 1.1 * dg * du + (r * u_store + 8 * u_acc) * a.abs()
        dy = (gamma(f) + r * u_store) * abs_y + da @ w2_abs.T
        w = topk_weights[tok, j, None].double()
        bound.index_add_(0, tok, w * (dy + (r + 1) * u_store * (a.abs() @ w2_abs.T)))
    return bound
# --8<-- [end:reference]


# --8<-- [start:waste]
def imbalance_costs(counts, block_m):
    """Rows each scheme computes for the same routing: useful sum n_e, the grouped kernel's padded tiles,
    a batched GEMM padded to max n_e for every expert; and max/mean, the factor by which the busiest expert
    (one GPU per expert in expert parallelism, or the longest per-expert GEMM) exceeds a balanced one."""
    c = counts.long()
    useful = int(c.sum())
    grouped = int(((c + block_m - 1) // block_m * block_m).sum())
    bmm = int(c.numel() * c.max())
    return {"useful": useful, "grouped": grouped, "padded_bmm": bmm,
            "grouped_waste": (grouped - useful) / grouped, "bmm_waste": (bmm - useful) / bmm,
            "max_over_mean": float(c.max()) / (useful / c.numel())}
# --8<-- [end:waste]
