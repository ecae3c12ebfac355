"""Long-context KV-cache compression on a tiny decoder trained in seconds on a retrieval task.

Eviction policies (full, window, StreamingLLM sinks + window, H2O heavy hitters + recent, SnapKV
observation-window selection) choose, per head, which cached tokens the last (query) token attends to;
quantisers (int8/int4/int2, per-token or per-channel, asymmetric with a zero point, KIVI: K per channel,
V per token; fp8 e4m3 with one scale per tensor) store every token in fewer bits. Used by
notebooks/framework/kv-compression-lab.ipynb and tested by tests/test_framework_kv_compress.py.

Positions: the cache stores K after RoPE, rotated at the token's original position (what vLLM stores);
every policy keeps those original positions. StreamingLLM instead re-positions kept tokens within the
cache (positions 0..n-1) so it can run past the trained length; `attend(..., positions="cache")` does
that from the un-rotated keys. The quantisers here act on K before RoPE (rotation is applied after
dequantising); a cache that stores rotated K quantises after the rotation instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# ---- the task: key-value pairs early in a long context, a query at the end -------------------------
BOS, NONE, N_FILL, N_KEY, N_VAL = 0, 1, 16, 16, 16
FILL0 = 2
PAIR0 = FILL0 + N_FILL                  # pair token (k, v) = PAIR0 + k * N_VAL + v
QUERY0 = PAIR0 + N_KEY * N_VAL          # query token for key k = QUERY0 + k
VAL0 = QUERY0 + N_KEY                   # answer token for value v = VAL0 + v
VOCAB = VAL0 + N_VAL
KEY_OF = torch.full((VOCAB,), N_KEY)   # key index of a pair or query token, N_KEY (a zero row) otherwise
VAL_OF = torch.full((VOCAB,), N_VAL)   # value index of a pair or answer token
KEY_OF[PAIR0:QUERY0] = torch.arange(N_KEY).repeat_interleave(N_VAL)
KEY_OF[QUERY0:VAL0] = torch.arange(N_KEY)
VAL_OF[PAIR0:QUERY0] = torch.arange(N_VAL).repeat(N_KEY)
VAL_OF[VAL0:VOCAB] = torch.arange(N_VAL)


def make_batch(batch: int, T: int = 64, pairs: int = 8, p_absent: float = 0.25, gen=None):
    """[BOS] + (T-2) context tokens (`pairs` (key, value) tokens with distinct keys at random places,
    filler elsewhere) + [query]. The answer is the value of the queried key, or NONE when the key
    is absent from the context. Returns ids [B, T], answer [B], needle position [B] (-1 if absent)."""
    ctx = T - 2
    ids = torch.randint(FILL0, FILL0 + N_FILL, (batch, T), generator=gen)
    ids[:, 0] = BOS
    keys = torch.rand(batch, N_KEY, generator=gen).argsort(-1)[:, :pairs]          # distinct keys
    vals = torch.randint(0, N_VAL, (batch, pairs), generator=gen)
    pos = torch.rand(batch, ctx, generator=gen).argsort(-1)[:, :pairs] + 1         # distinct places
    ids.scatter_(1, pos, PAIR0 + keys * N_VAL + vals)
    absent = torch.rand(batch, generator=gen) < p_absent
    which = torch.randint(0, pairs, (batch,), generator=gen)
    qkey = keys.gather(1, which[:, None])[:, 0]
    missing = torch.rand(batch, N_KEY, generator=gen).scatter(1, keys, 2.0).argmin(-1)  # a key not in context
    qkey = torch.where(absent, missing, qkey)
    ids[:, -1] = QUERY0 + qkey
    answer = torch.where(absent, torch.full_like(qkey, NONE), VAL0 + vals.gather(1, which[:, None])[:, 0])
    needle = torch.where(absent, torch.full_like(qkey, -1), pos.gather(1, which[:, None])[:, 0])
    return ids, answer, needle


# --8<-- [start:model]
def rope(x: torch.Tensor, pos: torch.Tensor, rot: int, base: float = 10000.0) -> torch.Tensor:
    """Rotate the first `rot` dims of x [..., n, d] by the positions pos [..., n] (NeoX half split);
    the other d - rot dims carry content only (partial rotary, as in GPT-NeoX)."""
    half = rot // 2
    inv = base ** (-torch.arange(half, dtype=torch.float32, device=x.device) / half)
    ang = pos.to(torch.float32)[..., None] * inv
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class TinyDecoder(torch.nn.Module):
    """One causal attention layer with RoPE and an MLP; enough to learn retrieval by content."""

    def __init__(self, d: int = 64, heads: int = 2, rot: int = 16):
        super().__init__()
        self.h, self.dh, self.rot = heads, d // heads, rot
        self.emb = torch.nn.Embedding(VOCAB, d)
        # factorised token embeddings: pair (k, v) and query k also add a key row, pair and answer a value row
        self.key_emb = torch.nn.Embedding(N_KEY + 1, d, padding_idx=N_KEY)
        self.val_emb = torch.nn.Embedding(N_VAL + 1, d, padding_idx=N_VAL)
        self.register_buffer("key_of", KEY_OF.clone(), persistent=False)
        self.register_buffer("val_of", VAL_OF.clone(), persistent=False)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.head = torch.nn.Linear(d, VOCAB)

    def qkv_states(self, ids: torch.Tensor):
        """x [B, T, d] and q, k, v [B, H, T, dh] before RoPE (the cache is filled from these)."""
        x = self.emb(ids) + self.key_emb(self.key_of[ids]) + self.val_emb(self.val_of[ids])
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        return x, q, k, v

    def finish(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """Residual + output projection + MLP + logits, from the attention output ctx [B, H, n, dh]."""
        B, H, n, dh = ctx.shape
        x = x + self.o(ctx.transpose(1, 2).reshape(B, n, H * dh))
        x = x + self.mlp(self.ln2(x))
        return self.head(x)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [B, V] of the last position, the only one the task scores (one layer: the other
        positions' outputs feed nothing), attending over the whole sequence with SDPA."""
        x, q, k, v = self.qkv_states(ids)
        pos = torch.arange(ids.shape[1], device=ids.device)
        ctx = F.scaled_dot_product_attention(rope(q[:, :, -1:], pos[-1:], self.rot), rope(k, pos, self.rot), v)
        return self.finish(x[:, -1:], ctx)[:, -1]
# --8<-- [end:model]


def train(model: TinyDecoder, steps: int, batch: int = 256, T: int = 64, lr: float = 3e-3, seed: int = 0,
          device: str = "cpu", pairs: int = 8) -> list[float]:
    """Cross-entropy on the answer only (the last position). Returns the loss per step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    losses = []
    for _ in range(steps):
        ids, ans, _ = make_batch(batch, T, pairs, gen=gen)
        loss = F.cross_entropy(model(ids.to(device)), ans.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


# --8<-- [start:policies]
def _attn_probs(q_t: torch.Tensor, k_rot: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax over cached tokens of one query per (B, H): q_t [B, H, dh], k_rot [B, H, T, dh], mask [B, H, T]."""
    s = torch.einsum("bhd,bhtd->bht", q_t, k_rot) / math.sqrt(q_t.shape[-1])
    return s.masked_fill(~mask, float("-inf")).softmax(-1)


def select(policy: str, budget: int, q_rot, k_rot, sinks: int = 4, obs: int = 4, pool: int = 3) -> torch.Tensor:
    """Indices [B, H, n] (sorted, n = min(T, budget)) of the cached tokens the last token attends to.
    q_rot, k_rot [B, H, T, dh] are after RoPE at the original positions; token T-1 is the query.
    window: the last n; sink: the first `sinks` + the last n - sinks (StreamingLLM);
    h2o: streaming, never more than n cached: before adding token t, evict the token with the smallest
    attention accumulated so far outside the last n//2 (H2O); snapkv: after prefill with the full cache,
    the last `obs` queries vote (probabilities summed, avg-pooled over `pool` neighbours) and the top
    n - obs prefix tokens are kept with the observation window itself (SnapKV)."""
    B, H, T, _ = k_rot.shape
    dev = k_rot.device
    n = min(T, budget)
    ar = torch.arange(T, device=dev)
    if policy == "full":
        return ar.expand(B, H, T)
    if policy == "window":
        return ar[T - n:].expand(B, H, n)
    if policy == "sink":
        return torch.cat([ar[:sinks], ar[T - (n - sinks):]]).expand(B, H, n)
    if policy == "h2o":
        recent = n // 2
        kept = torch.zeros(B, H, T, dtype=torch.bool, device=dev)
        score = torch.zeros(B, H, T, dtype=q_rot.dtype, device=dev)
        for t in range(T):
            if t >= n:  # the cache is full: evict one old token before adding token t
                old = kept & (ar < t - recent + 1)  # the last `recent` slots (t - recent + 1 .. t) are protected
                victim = score.masked_fill(~old, float("inf")).argmin(-1, keepdim=True)
                kept.scatter_(-1, victim, False)
            kept[..., t] = True
            score += _attn_probs(q_rot[:, :, t], k_rot, kept)
        return kept.nonzero()[:, -1].view(B, H, n)
    if policy == "snapkv":
        prefix = T - obs
        s = torch.einsum("bhqd,bhtd->bhqt", q_rot[:, :, prefix:], k_rot) / math.sqrt(k_rot.shape[-1])
        causal = ar[None, :] <= ar[prefix:, None]                       # [obs, T]
        vote = s.masked_fill(~causal, float("-inf")).softmax(-1)[..., :prefix].sum(-2)  # [B, H, prefix]
        vote = F.avg_pool1d(vote.reshape(B * H, 1, prefix), pool, stride=1, padding=pool // 2,
                            count_include_pad=False).view(B, H, prefix)
        top = vote.topk(n - obs, dim=-1).indices.sort(-1).values
        return torch.cat([top, ar[prefix:].expand(B, H, obs)], dim=-1)
    raise ValueError(policy)
# --8<-- [end:policies]


# --8<-- [start:attend]
def attend(q, k, v, idx: torch.Tensor, rot: int, positions: str = "original") -> torch.Tensor:
    """Attention of the last token over the kept cache entries idx [B, H, n]; q, k, v [B, H, T, dh]
    before RoPE. positions="original": K rotated at its original position, the query at T-1 (H2O,
    SnapKV, vLLM's cache). positions="cache": the kept tokens are re-numbered 0..n-1 and the query
    sits at n-1, the way StreamingLLM assigns positions inside its rolling cache. Returns [B, H, 1, dh]."""
    T = q.shape[2]
    n = idx.shape[-1]
    take = lambda x: x.gather(2, idx[..., None].expand(*idx.shape, x.shape[-1]))  # noqa: E731
    k_kept, v_kept = take(k), take(v)
    if positions == "original":
        k_rot = rope(k_kept, idx, rot)
        q_rot = rope(q[:, :, -1:], torch.full_like(idx[..., :1], T - 1), rot)
    elif positions == "cache":
        slot = torch.arange(n, device=idx.device).expand_as(idx)
        k_rot = rope(k_kept, slot, rot)
        q_rot = rope(q[:, :, -1:], slot[..., -1:], rot)
    else:
        raise ValueError(positions)
    p = (q_rot @ k_rot.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1)
    return p @ v_kept
# --8<-- [end:attend]


def last_logits(model: TinyDecoder, ids: torch.Tensor, policy: str = "full", budget: int = 10 ** 9,
                quant=None, positions: str = "original", **kw) -> torch.Tensor:
    """Next-token logits [B, V] at the query under an eviction policy and/or a KV quantiser."""
    x, q, k, v = model.qkv_states(ids)
    if quant is not None:
        k, v = quant(k, "k"), quant(v, "v")
    T = ids.shape[1]
    pos = torch.arange(T, device=ids.device)
    idx = select(policy, budget, rope(q, pos, model.rot), rope(k, pos, model.rot), **kw)
    ctx = attend(q, k, v, idx, model.rot, positions)
    return model.finish(x[:, -1:], ctx)[:, -1]


def kl_to_full(logits_full: torch.Tensor, logits: torch.Tensor) -> float:
    """Mean KL(p_full || p) of the next-token distributions, in nats."""
    lp, lq = logits_full.log_softmax(-1), logits.log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1).mean().item()


# --8<-- [start:quant]
@dataclass
class Quantized:
    codes: torch.Tensor   # uint8, `bits` per value, packed 8 // bits values per byte
    scale: torch.Tensor   # float32, one per group
    zero: torch.Tensor    # float32, one per group (the group minimum: x ≈ zero + code * scale)
    bits: int
    shape: tuple

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.zero))


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack integer codes in [0, 2^bits) along the last dim into uint8 (8 // bits per byte)."""
    per = 8 // bits
    c = codes.to(torch.int32).view(*codes.shape[:-1], -1, per)
    shifts = torch.arange(per, device=codes.device, dtype=torch.int32) * bits
    return (c << shifts).sum(-1).to(torch.uint8)  # disjoint bit fields: the sum is a bitwise or, < 256


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    per = 8 // bits
    shifts = torch.arange(per, device=packed.device, dtype=torch.uint8) * bits
    return ((packed[..., None] >> shifts) & (2 ** bits - 1)).flatten(-2)


def quantize(x: torch.Tensor, bits: int, axis: str, group: int = 32) -> Quantized:
    """Asymmetric quantisation of x [B, H, T, dh] with a zero point. axis="token": one (scale, zero)
    per token and head over its dh channels; axis="channel": one per channel over each group of
    `group` consecutive tokens (KIVI's K). Round to nearest, so |x - dequant| <= scale / 2."""
    B, H, T, dh = x.shape
    g = x if axis == "token" else x.view(B, H, T // group, group, dh).transpose(-1, -2)  # [..., dh, group]
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    qmax = 2 ** bits - 1
    scale = ((hi - lo) / qmax).clamp_min(1e-8)
    codes = ((g - lo) / scale).round().clamp(0, qmax)
    return Quantized(pack(codes, bits), scale, lo, bits, tuple(g.shape))


def dequantize(qz: Quantized, axis: str, shape: tuple) -> torch.Tensor:
    g = unpack(qz.codes, qz.bits).view(qz.shape).to(qz.scale.dtype) * qz.scale + qz.zero
    if axis == "token":
        return g
    B, H, T, dh = shape
    return g.transpose(-1, -2).reshape(B, H, T, dh)
# --8<-- [end:quant]


def fp8_roundtrip(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """fp8 (e4m3) KV with one float32 scale per tensor, as vLLM's per-tensor scheme; here the scale is
    amax / 448 (the e4m3 maximum), vLLM's own calibration picks it differently. Returns (dequantised, bytes)."""
    scale = x.abs().amax().clamp_min(1e-8) / torch.finfo(torch.float8_e4m3fn).max
    stored = (x / scale).to(torch.float8_e4m3fn)
    return stored.to(x.dtype) * scale, stored.numel() * stored.element_size() + 4


# --8<-- [start:bytes]
def eviction_bytes(tokens: int, heads: int, dh: int, elem: int = 2) -> int:
    """K and V of `tokens` cached tokens per head, one layer, 16-bit elements."""
    return 2 * tokens * heads * dh * elem


def quant_bytes(T: int, heads: int, dh: int, bits_k: int, bits_v: int, axis_k: str, axis_v: str,
                group: int = 32, meta: int = 4) -> int:
    """Exact bytes of a quantised K and V (codes + a float32 scale and zero per group), one layer."""
    def one(bits, axis):
        groups = T * heads if axis == "token" else (T // group) * heads * dh
        return T * heads * dh * bits // 8 + 2 * meta * groups
    return one(bits_k, axis_k) + one(bits_v, axis_v)
# --8<-- [end:bytes]


QUANT_SCHEMES = {  # name: (bits K, bits V, axis K, axis V); "KIVI" = KIVI's axes (K per channel, V per token),
    # with V grouped over the whole head; the KIVI code also splits V into groups of `group` channels,
    # keeps the most recent tokens unquantised and stores scale and zero in fp16.
    "int8 per-token": (8, 8, "token", "token"),
    "int4 per-token": (4, 4, "token", "token"),
    "int4 KIVI": (4, 4, "channel", "token"),
    "int2 per-token": (2, 2, "token", "token"),
    "int2 KIVI": (2, 2, "channel", "token"),
}


def make_quant(bits_k: int, bits_v: int, axis_k: str, axis_v: str, group: int = 32, store: dict | None = None):
    """A quantiser for last_logits: quantise then dequantise K and V; record the stored bytes in `store`."""
    def q(x, which):
        bits, axis = (bits_k, axis_k) if which == "k" else (bits_v, axis_v)
        qz = quantize(x, bits, axis, group)
        if store is not None:
            store[which] = qz.nbytes() // x.shape[0]  # per sequence
        return dequantize(qz, axis, tuple(x.shape))
    return q
