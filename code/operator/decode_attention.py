"""Decode attention (docs/operator/decode-attention.md): one query token per sequence against a long
KV cache, as a ladder of Triton kernels, plus the cost model and MLA's absorbed decode in PyTorch.

Rungs: (1) one program per (batch, query head) looping over the whole cache; (2) split-KV
(Flash-Decoding): grid (batch, query head, split), each split writes its partial (m, l, acc) to a
workspace and a second kernel merges them exactly; (3) the same over a paged cache
[num_blocks, page, H_kv, d] addressed through a block table, with ragged lengths; (4) paged + GQA
packing: one program per (batch, KV head, split) loads each K/V tile once for all G query heads of
the group, so the scores are a (G_pad x d) @ (d x BLOCK_N) tile GEMM on tl.dot.

Kernels compute in fp32 and store in the output's dtype. In CI they run in Triton's CPU interpreter
(TRITON_INTERPRET=1 set before triton is imported); on a GPU the same code compiles. Checked by
tests/test_operator_decode_attention.py and notebooks/operator/decode-attention-lab.ipynb.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

LOG2E = 1.4426950408889634


# --8<-- [start:cost]
def decode_cost(batch, kv_len, h_q, h_kv, d, elem_bytes=2):
    """One decode step of attention: FLOPs (QK^T and PV, 2 each per multiply-add) and the bytes that
    must cross HBM: the K and V cache once (H_kv heads), q read and out written (H_q heads)."""
    flops = 4 * batch * h_q * kv_len * d
    cache = 2 * batch * kv_len * h_kv * d * elem_bytes
    return flops, cache + 2 * batch * h_q * d * elem_bytes


def decode_intensity(h_q, h_kv, d, kv_len, elem_bytes=2):
    """FLOP/B of a decode step: each cached K/V element serves G = H_q / H_kv query heads, so for a
    long cache the intensity tends to G / (elem_bytes / 2), i.e. G for fp16."""
    flops, moved = decode_cost(1, kv_len, h_q, h_kv, d, elem_bytes)
    return flops / moved


def num_splits(batch, heads, kv_len, num_sms, block_n, min_chunk=256, max_splits=128):
    """Flash-Decoding's split count: enough programs for about two waves over the SMs, but no split
    shorter than min_chunk keys (the partial state written per split must stay small next to the
    keys it read). Returns (splits, chunk), chunk a multiple of block_n."""
    want = max(1, triton.cdiv(2 * num_sms, batch * heads))
    splits = max(1, min(want, triton.cdiv(kv_len, min_chunk), max_splits))
    chunk = triton.cdiv(triton.cdiv(kv_len, splits), block_n) * block_n
    return triton.cdiv(kv_len, chunk), chunk
# --8<-- [end:cost]


# --8<-- [start:core]
@triton.jit
def _attend_range(acc, m_i, l_i, q, K, V, bt_row, base_b, h_kv, lo, hi, offs_n, offs_d,
                  stride_blk, stride_tok, stride_h, qk_scale, PAGE: tl.constexpr, PAGED: tl.constexpr,
                  BLOCK_N: tl.constexpr):
    """Online softmax over keys [lo, hi) of one sequence for ONE query vector q [d] (fp32).
    Contiguous cache: token t of sequence b is at base_b + t*stride_tok. Paged cache: its page is
    bt_row[t // PAGE] and it sits at page*stride_blk + (t % PAGE)*stride_tok."""
    for start in range(lo, hi, BLOCK_N):
        tok = start + offs_n
        valid = tok < hi
        if PAGED:
            page = tl.load(bt_row + tok // PAGE, mask=valid, other=0).to(tl.int64)
            row = page * stride_blk + (tok % PAGE) * stride_tok + h_kv * stride_h
        else:
            row = base_b + tok.to(tl.int64) * stride_tok + h_kv * stride_h
        k = tl.load(K + row[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * qk_scale  # [BLOCK_N] scores, base-2 units
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.math.exp2(s - m_new)
        alpha = tl.math.exp2(m_i - m_new)  # rescale of the old state, e^(m - m')
        v = tl.load(V + row[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    return acc, m_i, l_i
# --8<-- [end:core]


# --8<-- [start:naive]
@triton.jit
def decode_naive_kernel(Q, K, V, O, LENS, H_Q, GROUP, stride_qb, stride_qh, stride_kb, stride_tok, stride_h,
                        stride_ob, stride_oh, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rung 1: one program per (batch, query head) walks the whole cache [B, L, H_kv, d]."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d).to(tl.float32)
    n = tl.load(LENS + b)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([], dtype=tl.float32)
    acc, m_i, l_i = _attend_range(acc, m_i, l_i, q, K, V, LENS, b.to(tl.int64) * stride_kb, h // GROUP, 0, n,
                                  offs_n, offs_d, 0, stride_tok, stride_h, qk_scale, 1, False, BLOCK_N)
    tl.store(O + b * stride_ob + h * stride_oh + offs_d, (acc / l_i).to(O.dtype.element_ty))
# --8<-- [end:naive]


# --8<-- [start:split]
@triton.jit
def decode_split_kernel(Q, K, V, BT, LENS, WS_ACC, WS_M, WS_L, H_Q, GROUP, SPLITS, CHUNK,
                        stride_qb, stride_qh, stride_kb, stride_blk, stride_tok, stride_h, stride_bt,
                        qk_scale, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
                        PAGED: tl.constexpr):
    """Rungs 2 and 3: program (b, h, s) covers keys [s*CHUNK, (s+1)*CHUNK) of sequence b and writes its
    unnormalised partial state to the workspace: acc = sum p v, m = running max (base 2), l = sum p.
    A split past the end of a short sequence writes m = -inf, l = 0, acc = 0 (weight 0 in the merge)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d).to(tl.float32)
    n = tl.load(LENS + b)
    lo = s * CHUNK
    hi = tl.minimum(lo + CHUNK, n)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([], dtype=tl.float32)
    acc, m_i, l_i = _attend_range(acc, m_i, l_i, q, K, V, BT + b * stride_bt, b.to(tl.int64) * stride_kb,
                                  h // GROUP, lo, hi, offs_n, offs_d, stride_blk, stride_tok, stride_h,
                                  qk_scale, PAGE, PAGED, BLOCK_N)
    slot = (b * H_Q + h) * SPLITS + s
    tl.store(WS_ACC + slot.to(tl.int64) * HEAD_DIM + offs_d, acc)
    tl.store(WS_M + slot, m_i)
    tl.store(WS_L + slot, l_i)


@triton.jit
def decode_merge_kernel(WS_ACC, WS_M, WS_L, O, LSE, H_Q, SPLITS, stride_ob, stride_oh,
                        HEAD_DIM: tl.constexpr, SPLITS_P2: tl.constexpr):
    """Exact merge of the partial states of one (b, h): M = max_s m_s, w_s = 2^(m_s - M),
    o = sum_s w_s acc_s / sum_s w_s l_s, lse = (M + log2 sum_s w_s l_s) * ln 2."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_P2)
    offs_d = tl.arange(0, HEAD_DIM)
    slot = (b * H_Q + h) * SPLITS + offs_s
    inside = offs_s < SPLITS
    m = tl.load(WS_M + slot, mask=inside, other=float("-inf"))
    big_m = tl.max(m, axis=0)  # finite: split 0 of a non-empty sequence has keys
    w = tl.math.exp2(m - big_m)  # 0 for empty splits and padding
    denom = tl.sum(w * tl.load(WS_L + slot, mask=inside, other=0.0), axis=0)
    acc = tl.load(WS_ACC + slot.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :], mask=inside[:, None], other=0.0)
    o = tl.sum(w[:, None] * acc, axis=0) / denom
    tl.store(O + b * stride_ob + h * stride_oh + offs_d, o.to(O.dtype.element_ty))
    tl.store(LSE + b * H_Q + h, (big_m + tl.math.log2(denom)) * 0.6931471805599453)
# --8<-- [end:split]


# --8<-- [start:gqa]
@triton.jit
def decode_gqa_kernel(Q, K, V, BT, LENS, WS_ACC, WS_M, WS_L, H_Q, SPLITS, CHUNK,
                      stride_qb, stride_qh, stride_blk, stride_tok, stride_h, stride_bt, qk_scale,
                      GROUP: tl.constexpr, G_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                      PAGE: tl.constexpr):
    """Rung 4: program (b, kv head, s) holds the G query heads of the group as a [G_PAD, d] tile
    (G_PAD >= 16 for tl.dot; the padding rows are zeros and never stored), loads each K/V tile of the
    paged cache ONCE and computes S = Q K^T ([G_PAD, BLOCK_N]) and acc += P V on tensor cores."""
    b = tl.program_id(0)
    hk = tl.program_id(1)
    s = tl.program_id(2)
    offs_g = tl.arange(0, G_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    heads = hk * GROUP + offs_g
    real = offs_g < GROUP
    q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=real[:, None], other=0.0)
    n = tl.load(LENS + b)
    lo = s * CHUNK
    hi = tl.minimum(lo + CHUNK, n)
    acc = tl.zeros([G_PAD, HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([G_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([G_PAD], dtype=tl.float32)
    bt_row = BT + b * stride_bt
    for start in range(lo, hi, BLOCK_N):
        tok = start + offs_n
        valid = tok < hi
        page = tl.load(bt_row + tok // PAGE, mask=valid, other=0).to(tl.int64)
        row = page * stride_blk + (tok % PAGE) * stride_tok + hk * stride_h
        k = tl.load(K + row[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)  # [BLOCK_N, d], once
        sc = tl.dot(q, tl.trans(k)) * qk_scale  # [G_PAD, BLOCK_N]: a tiny GEMM instead of G GEMVs
        sc = tl.where(valid[None, :], sc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=1))
        p = tl.math.exp2(sc - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        v = tl.load(V + row[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    slot = (b * H_Q + heads) * SPLITS + s
    tl.store(WS_ACC + slot.to(tl.int64)[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=real[:, None])
    tl.store(WS_M + slot, m_i, mask=real)
    tl.store(WS_L + slot, l_i, mask=real)
# --8<-- [end:gqa]


# --8<-- [start:launch]
def _num_sms(device):
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # CPU interpreter: any small number exercises the split path


def make_workspace(batch, h_q, splits, d, device):
    """fp32 partial states: acc [B*H_q*S, d], m and l [B*H_q*S]."""
    rows = batch * h_q * splits
    return (torch.empty(rows, d, device=device), torch.empty(rows, device=device), torch.empty(rows, device=device))


def decode_attention(q, k, v, lens, mode, block_table=None, page=16, splits=None, block_n=None, out=None,
                     lse=None, workspace=None, num_warps=4):
    """q [B, H_q, d]; contiguous cache k, v [B, L, H_kv, d] (modes 'naive', 'split') or paged cache
    [num_blocks, page, H_kv, d] with block_table [B, max_pages] int32 (modes 'paged', 'gqa');
    lens [B] int32, every entry >= 1. Returns out [B, H_q, d] (and fills lse when given)."""
    B, h_q, d = q.shape
    h_kv = k.shape[2]
    group = h_q // h_kv
    assert h_q % h_kv == 0 and q.stride(-1) == k.stride(-1) == v.stride(-1) == 1 and k.stride() == v.stride()
    qk_scale = LOG2E / math.sqrt(d)
    out = torch.empty_like(q) if out is None else out
    if mode == "naive":
        block_n = block_n or (16 if q.device.type == "cpu" else 64)
        decode_naive_kernel[(B, h_q)](q, k, v, out, lens, h_q, group, q.stride(0), q.stride(1), k.stride(0),
                                      k.stride(1), k.stride(2), out.stride(0), out.stride(1), qk_scale,
                                      HEAD_DIM=d, BLOCK_N=block_n, num_warps=num_warps)
        return out
    paged = mode in ("paged", "gqa")
    max_len = block_table.shape[1] * page if paged else k.shape[1]
    block_n = block_n or (16 if q.device.type == "cpu" else 64)
    grid_heads = h_kv if mode == "gqa" else h_q
    if splits is None:
        splits, chunk = num_splits(B, grid_heads, max_len, _num_sms(q.device), block_n)
    else:
        chunk = triton.cdiv(triton.cdiv(max_len, splits), block_n) * block_n
        splits = triton.cdiv(max_len, chunk)
    ws_acc, ws_m, ws_l = workspace if workspace is not None else make_workspace(B, h_q, splits, d, q.device)
    assert ws_m.numel() >= B * h_q * splits
    bt = block_table if paged else lens  # unused pointer in the contiguous case
    stride_blk = k.stride(0) if paged else 0
    stride_bt = block_table.stride(0) if paged else 0
    if mode == "gqa":
        decode_gqa_kernel[(B, h_kv, splits)](q, k, v, bt, lens, ws_acc, ws_m, ws_l, h_q, splits, chunk,
                                             q.stride(0), q.stride(1), stride_blk, k.stride(1), k.stride(2),
                                             stride_bt, qk_scale, GROUP=group,
                                             G_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=d,
                                             BLOCK_N=block_n, PAGE=page, num_warps=num_warps)
    else:
        decode_split_kernel[(B, h_q, splits)](q, k, v, bt, lens, ws_acc, ws_m, ws_l, h_q, group, splits, chunk,
                                              q.stride(0), q.stride(1), 0 if paged else k.stride(0), stride_blk,
                                              k.stride(1), k.stride(2), stride_bt, qk_scale, HEAD_DIM=d,
                                              BLOCK_N=block_n, PAGE=page, PAGED=paged, num_warps=num_warps)
    lse = torch.empty(B, h_q, device=q.device) if lse is None else lse
    decode_merge_kernel[(B, h_q)](ws_acc, ws_m, ws_l, out, lse, h_q, splits, out.stride(0), out.stride(1),
                                  HEAD_DIM=d, SPLITS_P2=max(2, triton.next_power_of_2(splits)), num_warps=num_warps)
    return out
# --8<-- [end:launch]


# --8<-- [start:paging]
def page_cache(k, v, lens, page, generator=None, spare=3):
    """Copy a contiguous cache [B, L, H_kv, d] into a paged one [num_blocks, page, H_kv, d]: each
    sequence gets ceil(len/page) pages at random, non-contiguous block ids (plus `spare` unused blocks
    so ids are not a permutation of 0..n-1). Returns (k_pages, v_pages, block_table [B, max_pages])."""
    B, _, h_kv, d = k.shape
    need = [triton.cdiv(int(n), page) for n in lens.tolist()]
    total = sum(need) + spare
    ids = torch.randperm(total, generator=generator)[: sum(need)]
    kp = torch.zeros(total, page, h_kv, d, dtype=k.dtype, device=k.device)
    vp = torch.zeros_like(kp)
    table = torch.zeros(B, max(need), dtype=torch.int32)
    flat_k, flat_v = kp.view(total * page, h_kv, d), vp.view(total * page, h_kv, d)
    pos = 0
    for b, (n, pages) in enumerate(zip(lens.tolist(), need)):
        blocks = ids[pos: pos + pages]
        pos += pages
        table[b, :pages] = blocks.int()
        t = torch.arange(n)
        rows = (blocks.repeat_interleave(page)[:n] * page + t % page).to(k.device)  # token t -> page row
        flat_k[rows] = k[b, :n]
        flat_v[rows] = v[b, :n]
    return kp, vp, table.to(k.device)


def gather_pages(k_pages, block_table, n):
    """The first n tokens of one sequence, contiguous [n, H_kv, d], read through its block-table row."""
    page = k_pages.shape[1]
    return k_pages[block_table[: triton.cdiv(n, page)].long()].flatten(0, 1)[:n]
# --8<-- [end:paging]


# --8<-- [start:reference]
class DecodeReference:
    """float32 SDPA (enable_gqa=True) on each sequence's contiguous cache, plus what the error bound
    needs: pv_abs = sum_j p_j |v_j| (SDPA with |V|) and M = ||q|| max_j ||k_j|| / sqrt(d).
    seqs: list of (k [n, H_kv, d], v [n, H_kv, d]) per batch entry."""

    def __init__(self, q, seqs):
        self.o, self.pv_abs, self.m, self.n = [], [], [], []
        for b, (k, v) in enumerate(seqs):
            qf = q[b].float()[:, None, :]  # [H_q, 1, d]
            kf, vf = (t.float().transpose(0, 1) for t in (k, v))  # [H_kv, n, d]
            both = torch.cat([vf, vf.abs()], dim=-1)  # one SDPA call gives P V and P |V|
            with sdpa_kernel(SDPBackend.MATH):  # the exact-arithmetic path (fp32, no tf32 unless enabled)
                r = F.scaled_dot_product_attention(qf[None], kf[None], both[None], enable_gqa=True)[0, :, 0]
            d = q.shape[-1]
            self.o.append(r[:, :d])
            self.pv_abs.append(r[:, d:])
            group = q.shape[1] // k.shape[1]
            kmax = kf.norm(dim=-1).amax(dim=-1).repeat_interleave(group)
            self.m.append(qf[:, 0].norm(dim=-1) * kmax / math.sqrt(d))
            self.n.append(k.shape[0])
        self.o, self.pv_abs, self.m = (torch.stack(x) for x in (self.o, self.pv_abs, self.m))
        self.n = torch.tensor(self.n, device=q.device, dtype=torch.float32)

    def bound(self, dtype=torch.float16):
        """Elementwise bound (derivation in the lab): output rounding u|o| ... plus 2x margin on
        P rounding (u), fp32 accumulation n*2^-24, exp2/rescale 2^-16 and score error 2*delta."""
        u = 2.0**-11 if dtype == torch.float16 else 2.0**-8
        d = self.o.shape[-1]
        delta = (d + 1) * 2.0**-24 * self.m
        coef = 2 * (u + self.n[:, None] * 2.0**-24 + 2.0**-16 + 2 * delta)
        return 2 * u * self.o.abs() + coef[..., None] * self.pv_abs + 2.0**-24

    def check(self, out, what=""):
        err = (out.float() - self.o).abs()
        bound = self.bound(out.dtype)
        bad = ~(err <= bound)  # NaN counts as out of bound
        assert not bad.any(), f"{what}: {int(bad.sum())} elements out of bound, max err/bound {(err / bound).max().item():.2f}"
        return (err / bound).max().item()
# --8<-- [end:reference]


# --8<-- [start:mla]
def mla_decode_decompressed(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv):
    """MLA decode the direct way (DeepSeek-V2 §2.1.2-2.1.3): decompress every cached latent into
    per-head keys and values, then ordinary attention.
    q_nope [H, d_h], q_rope [H, d_r]; cache c_kv [L, d_c], k_rope [L, d_r] (shared by all heads);
    w_uk, w_uv [H, d_h, d_c]. Returns o [H, d_h] (before W^O)."""
    k_nope = torch.einsum("hkc,lc->hlk", w_uk, c_kv)  # [H, L, d_h]: 2*H*L*d_h*d_c FLOPs
    v = torch.einsum("hkc,lc->hlk", w_uv, c_kv)  # same again
    scale = 1.0 / math.sqrt(q_nope.shape[-1] + q_rope.shape[-1])
    s = (torch.einsum("hk,hlk->hl", q_nope, k_nope) + q_rope @ k_rope.T) * scale
    return torch.einsum("hl,hlk->hk", torch.softmax(s, dim=-1), v)


def mla_decode_absorbed(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv):
    """Absorbed form: q_nope . (W^UK_h c_j) = (W^UK_h^T q_nope) . c_j, so fold W^UK into the query
    (a d_c-dim query per head) and attend directly over the latent cache, which acts as ONE shared
    KV head of dim d_c + d_r (value = c_kv); W^UV_h is applied once to the d_c-dim result (and can be
    folded further into W^O)."""
    q_lat = torch.einsum("hk,hkc->hc", q_nope, w_uk)  # [H, d_c]
    scale = 1.0 / math.sqrt(q_nope.shape[-1] + q_rope.shape[-1])
    s = (q_lat @ c_kv.T + q_rope @ k_rope.T) * scale  # [H, L]: MQA with G = H
    o_lat = torch.softmax(s, dim=-1) @ c_kv  # [H, d_c]
    return torch.einsum("hc,hkc->hk", o_lat, w_uv)


def mla_costs(heads, d_h, d_c, d_r, d_v=None, elem_bytes=2):
    """Per cached token per layer: elements cached, and decode-attention FLOPs spent on that token,
    for (a) an MHA-style cache of decompressed K (d_h + d_r per head) and V (d_v per head),
    (b) the latent cache decompressed on the fly each step, (c) the absorbed form."""
    d_v = d_h if d_v is None else d_v
    attn_mha = 2 * heads * (d_h + d_r) + 2 * heads * d_v  # QK^T and PV over full heads
    decompress = 2 * heads * d_h * d_c + 2 * heads * d_v * d_c  # W^UK c and W^UV c for this token
    absorbed = 2 * heads * (d_c + d_r) + 2 * heads * d_c  # QK^T over [c; k_r], PV over c
    return {
        "cache_elems": {"mha": heads * (d_h + d_r + d_v), "latent": d_c + d_r},
        "cache_bytes": {"mha": heads * (d_h + d_r + d_v) * elem_bytes, "latent": (d_c + d_r) * elem_bytes},
        "flops": {"mha": attn_mha, "decompress": decompress + attn_mha, "absorbed": absorbed},
        # per decode step, independent of L: absorbing q (W^UK^T q) and the W^UV up-projection of o
        "flops_per_step_absorbed": 2 * heads * d_h * d_c + 2 * heads * d_v * d_c,
    }
# --8<-- [end:mla]
