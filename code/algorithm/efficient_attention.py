"""Long-context attention and state-space layers (docs/algorithm/efficient-attention.md).

Sliding-window attention (a banded mask, local attention that gathers only its window, Mistral's
rolling KV buffer), kernelised linear attention in its parallel, recurrent and chunked forms, a
selective state-space layer (Mamba) with the sequential reference scan and two parallel
associative scans (Hillis-Steele and Blelloch) over (a, b) pairs, the scalar-decay SSM of Mamba-2
in its quadratic ("attention") form, and the KV / state memory of each kind of layer as formulas.
Checked in tests/test_algorithm_efficient_attention.py and notebooks/algorithm/linear-attention-lab.ipynb
against torch's scaled_dot_product_attention, transformers' MambaMixer and the caches' own bytes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:sliding]
def band_mask(T, window):
    """True where query i may attend key j: causal and at most window-1 tokens back."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    return (j <= i) & (j > i - window)


def local_attention(q, k, v, window):
    """Sliding-window attention that touches only T * window scores: each query gathers its own
    window of keys with unfold instead of masking a T x T matrix. q, k, v: (B, H, T, d)."""
    T, d = q.shape[-2], q.shape[-1]
    kp = F.pad(k, (0, 0, window - 1, 0)).unfold(-2, window, 1)    # (B, H, T, d, window)
    vp = F.pad(v, (0, 0, window - 1, 0)).unfold(-2, window, 1)
    scores = torch.einsum("bhtd,bhtdw->bhtw", q, kp) / math.sqrt(d)
    key_pos = torch.arange(T)[:, None] - (window - 1) + torch.arange(window)[None, :]
    scores = scores.masked_fill(key_pos < 0, float("-inf"))       # padding before token 0
    return torch.einsum("bhtw,bhtdw->bhtd", scores.softmax(-1), vp)


def receptive_field(n_layers, window):
    """Tokens that can reach the last position through n stacked windows (itself included)."""
    return n_layers * (window - 1) + 1


class RollingKVCache:
    """Mistral's rolling buffer: the K, V of position i live in slot i mod window, so the cache
    never holds more than `window` tokens. Slot order does not matter to softmax, which sums over
    a set; positions are already inside the keys (RoPE is applied before caching)."""

    def __init__(self, batch, n_kv_heads, window, d_head, dtype=torch.float32):
        self.k = torch.zeros(batch, n_kv_heads, window, d_head, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.window, self.pos = window, 0

    def append(self, k, v):                        # k, v: (B, n_kv, d_head), one new token
        slot = self.pos % self.window
        self.k[:, :, slot], self.v[:, :, slot] = k, v
        self.pos += 1

    def attend(self, q):                           # q: (B, n_heads, d_head)
        n = min(self.pos, self.window)             # slots 0..n-1 are the valid ones
        group = q.shape[1] // self.k.shape[1]      # GQA: each KV head serves `group` query heads
        k = self.k[:, :, :n].repeat_interleave(group, dim=1)
        v = self.v[:, :, :n].repeat_interleave(group, dim=1)
        p = torch.einsum("bhd,bhnd->bhn", q, k).div(math.sqrt(q.shape[-1])).softmax(-1)
        return torch.einsum("bhn,bhnd->bhd", p, v)

    def nbytes(self):
        return self.k.nbytes + self.v.nbytes
# --8<-- [end:sliding]


# --8<-- [start:linear]
def elu_feature_map(x):
    """phi(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020, eq. 7): keeps every 'score' positive."""
    return F.elu(x) + 1


def linear_attention_parallel(q, k, v, phi=elu_feature_map):
    """Training form, O(T^2 d): V_i' = sum_{j<=i} phi(q_i).phi(k_j) v_j / sum_{j<=i} phi(q_i).phi(k_j)."""
    a = (phi(q) @ phi(k).transpose(-1, -2)).tril()          # (phi(Q) phi(K)^T) masked causally
    return (a @ v) / a.sum(-1, keepdim=True)


def linear_attention_recurrent(q, k, v, phi=elu_feature_map):
    """Decoding form, O(T d^2): the whole past is S_t = sum phi(k_j) v_j^T (d_k x d_v) and
    z_t = sum phi(k_j) (d_k), both independent of T."""
    B, H, T, dk = q.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    z = q.new_zeros(B, H, dk)
    out = []
    for t in range(T):
        fk, fq = phi(k[:, :, t]), phi(q[:, :, t])
        S = S + fk[..., :, None] * v[:, :, t, None, :]       # rank-1 update of the state
        z = z + fk
        out.append((fq[..., None, :] @ S).squeeze(-2) / (fq * z).sum(-1, keepdim=True))
    return torch.stack(out, dim=2)


def linear_attention_chunked(q, k, v, chunk, phi=elu_feature_map):
    """What linear-attention kernels do: the masked quadratic form inside each chunk of C tokens
    (matrix multiplies), the carried state across chunks. O(T C d + T d^2) work."""
    fq, fk = phi(q), phi(k)
    B, H, T, dk = q.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    z = q.new_zeros(B, H, dk, 1)
    out = []
    for s in range(0, T, chunk):
        qc, kc, vc = fq[:, :, s:s + chunk], fk[:, :, s:s + chunk], v[:, :, s:s + chunk]
        a = (qc @ kc.transpose(-1, -2)).tril()               # intra-chunk, causal
        out.append((qc @ S + a @ vc) / (qc @ z + a.sum(-1, keepdim=True)))
        S = S + kc.transpose(-1, -2) @ vc                     # inter-chunk: fold the chunk into the state
        z = z + kc.sum(2)[..., None]
    return torch.cat(out, dim=2)
# --8<-- [end:linear]


# --8<-- [start:scan]
def combine(left, right):
    """(a1, b1) then (a2, b2): h -> a2 (a1 h + b1) + b2 = (a1 a2) h + (a2 b1 + b2). Associative,
    not commutative: `left` is the earlier segment."""
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


def scan_sequential(a, b):
    """Reference: h_t = a_t h_{t-1} + b_t with h_{-1} = 0, along dim 1. Returns every h_t."""
    h = torch.zeros_like(b[:, 0])
    hs = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        hs.append(h)
    return torch.stack(hs, dim=1)


def scan_hillis_steele(a, b):
    """Inclusive scan in ceil(log2 T) rounds; round r combines each element with the one 2^r back.
    O(T log T) work, every round fully parallel."""
    T, step = a.shape[1], 1
    while step < T:
        a_new, b_new = combine((a[:, :-step], b[:, :-step]), (a[:, step:], b[:, step:]))
        a = torch.cat([a[:, :step], a_new], dim=1)
        b = torch.cat([b[:, :step], b_new], dim=1)
        step *= 2
    return b                                       # with h_{-1} = 0, h_t is the b of the prefix


def scan_blelloch(a, b):
    """Work-efficient scan (Blelloch 1990): an up-sweep builds the totals of a balanced tree,
    a down-sweep hands each node the prefix before it. O(T) work, 2 log2 T rounds."""
    T = a.shape[1]
    n = 1 << max(T - 1, 0).bit_length()            # pad to a power of two with the identity (1, 0)
    pad = [0] * (2 * (a.dim() - 2)) + [0, n - T]
    a = F.pad(a, pad, value=1.0)
    b = F.pad(b, pad, value=0.0)
    elem_a, elem_b = a.clone(), b.clone()
    d = 1
    while d < n:                                   # up-sweep: node k := node k-d (earlier) o node k
        r = torch.arange(2 * d - 1, n, 2 * d)
        a[:, r], b[:, r] = combine((a[:, r - d], b[:, r - d]), (a[:, r], b[:, r]))
        d *= 2
    a[:, n - 1], b[:, n - 1] = 1.0, 0.0            # the root gets the empty prefix
    d = n // 2
    while d >= 1:                                  # down-sweep: left child gets P, right gets P o left total
        r = torch.arange(2 * d - 1, n, 2 * d)
        left_a, left_b = a[:, r - d].clone(), b[:, r - d].clone()
        a[:, r - d], b[:, r - d] = a[:, r], b[:, r]
        a[:, r], b[:, r] = combine((a[:, r], b[:, r]), (left_a, left_b))
        d //= 2
    _, h = combine((a, b), (elem_a, elem_b))       # exclusive prefix o element = inclusive
    return h[:, :T]
# --8<-- [end:scan]


# --8<-- [start:selective]
def discretize(delta, A, B):
    """Mamba's discretisation (the reference selective_scan_ref): A_bar = exp(delta A) (zero-order
    hold) and B_bar = delta B (its first-order form). delta: (b, L, D), A: (D, N), B: (b, L, N)."""
    dA = torch.exp(delta[..., None] * A)                      # (b, L, D, N)
    dB = delta[..., None] * B[:, :, None, :]                  # (b, L, D, N)
    return dA, dB


def selective_scan_sequential(x, delta, A, B, C, D):
    """y_t = C_t . h_t + D x_t with h_t = A_bar_t h_{t-1} + B_bar_t x_t, one step at a time."""
    dA, dB = discretize(delta, A, B)
    h = x.new_zeros(x.shape[0], x.shape[2], A.shape[1])       # (b, D, N): the whole past
    ys = []
    for t in range(x.shape[1]):
        h = dA[:, t] * h + dB[:, t] * x[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(-1))
    return torch.stack(ys, dim=1) + x * D


def selective_scan_parallel(x, delta, A, B, C, D, scan=scan_blelloch):
    """Same result through an associative scan over the pairs (A_bar_t, B_bar_t x_t)."""
    dA, dB = discretize(delta, A, B)
    h = scan(dA, dB * x[..., None])                           # (b, L, D, N): every h_t
    return (h * C[:, :, None, :]).sum(-1) + x * D


def lti_convolution(x, dA, dB, C, D):
    """Time-invariant SSM (S4): A_bar, B_bar, C the same at every step, so the recurrence unrolls
    into a causal convolution with kernel K_k = sum_n C_n A_bar_n^k B_bar_n. dA, dB: (D, N); C: (N,)."""
    L = x.shape[1]
    powers = dA[None] ** torch.arange(L, dtype=x.dtype)[:, None, None]   # (L, D, N)
    K = (powers * dB * C).sum(-1)                             # (L, D)
    y = torch.stack([(K[:t + 1].flip(0) * x[:, :t + 1]).sum(1) for t in range(L)], dim=1)
    return y + x * D


def ssd_quadratic(x, a, B, C):
    """Mamba-2's scalar decay (A_t = a_t I) makes the scan a masked 'attention':
    Y = (L o C B^T) X with L_ts = a_{s+1} ... a_t for s <= t. x: (b, T, P), a: (b, T), B, C: (b, T, N)."""
    cum = torch.cumsum(torch.log(a), dim=1)                   # log(a_1 ... a_t)
    seg = cum[:, :, None] - cum[:, None, :]                   # log(a_{s+1} ... a_t)
    causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    L = torch.exp(seg.masked_fill(~causal, float("-inf")))
    return (L * (C @ B.transpose(1, 2))) @ x


def ssd_recurrent(x, a, B, C):
    """The same layer as a recurrence: state h_t (N x P) = a_t h_{t-1} + B_t x_t^T, y_t = C_t^T h_t."""
    h = x.new_zeros(x.shape[0], B.shape[-1], x.shape[-1])
    ys = []
    for t in range(x.shape[1]):
        h = a[:, t, None, None] * h + B[:, t, :, None] * x[:, t, None, :]
        ys.append((C[:, t, :, None] * h).sum(1))
    return torch.stack(ys, dim=1)
# --8<-- [end:selective]


# --8<-- [start:mamba]
class SelectiveSSM(nn.Module):
    """A Mamba block's mixer, parameter for parameter the layout of transformers' MambaMixer:
    in_proj -> (x, z); causal depthwise conv over x; x_proj -> (delta_low_rank, B, C);
    dt_proj + softplus -> delta; selective scan; y * silu(z); out_proj."""

    def __init__(self, d_model, d_state=16, expand=2, d_conv=4, dt_rank=None):
        super().__init__()
        E = expand * d_model
        self.E, self.N, self.k = E, d_state, d_conv
        self.R = dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * E, bias=False)
        self.conv1d = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1)
        self.x_proj = nn.Linear(E, self.R + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.R, E)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(E, 1))
        self.D = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, d_model, bias=False)

    def _ssm_inputs(self, xc):                     # xc: (b, L, E) after conv + silu
        dt, B, C = self.x_proj(xc).split([self.R, self.N, self.N], dim=-1)
        return F.softplus(self.dt_proj(dt)), B, C  # delta, B, C all depend on the input

    def forward(self, u, scan=scan_blelloch):      # u: (b, L, d_model), training / prefill
        x, z = self.in_proj(u).chunk(2, dim=-1)
        L = u.shape[1]
        xc = F.silu(self.conv1d(x.transpose(1, 2))[..., :L].transpose(1, 2))
        delta, B, C = self._ssm_inputs(xc)
        y = selective_scan_parallel(xc, delta, -torch.exp(self.A_log), B, C, self.D, scan)
        return self.out_proj(y * F.silu(z))

    def init_state(self, batch):
        """Decoding state: the last d_conv-1 conv inputs and h (E x N). Size independent of T."""
        return (torch.zeros(batch, self.E, self.k - 1, dtype=self.D.dtype),
                torch.zeros(batch, self.E, self.N, dtype=self.D.dtype))

    def step(self, u_t, state):                    # u_t: (b, d_model), one token
        conv_state, h = state
        x, z = self.in_proj(u_t).chunk(2, dim=-1)
        window = torch.cat([conv_state, x[..., None]], dim=-1)          # (b, E, d_conv)
        xc = F.silu((window * self.conv1d.weight[:, 0]).sum(-1) + self.conv1d.bias)
        delta, B, C = self._ssm_inputs(xc)
        dA = torch.exp(delta[..., None] * -torch.exp(self.A_log))
        h = dA * h + delta[..., None] * B[:, None, :] * xc[..., None]
        y = (h * C[:, None, :]).sum(-1) + self.D * xc
        return self.out_proj(y * F.silu(z)), (window[..., 1:], h)
# --8<-- [end:mamba]


# --8<-- [start:memory]
@dataclass(frozen=True)
class Layers:
    """How many layers of each kind a model has, and their widths (elements are p bytes each)."""
    full: int = 0                  # full causal attention: KV grows with T
    sliding: int = 0               # sliding-window attention: KV capped at `window` tokens
    linear: int = 0                # linear attention: state d_k x d_v (+ normaliser d_k) per head
    ssm: int = 0                   # Mamba: state E x N plus the conv tail E x (d_conv - 1)
    n_kv: int = 8                  # KV heads of the attention layers
    d_head: int = 128
    window: int = 4096
    lin_heads: int = 0
    lin_dk: int = 0
    lin_dv: int = 0
    lin_normaliser: bool = True    # Katharopoulos keeps z; gated/delta variants do not
    lin_conv_channels: int = 0     # short causal conv before a linear layer (Qwen3-Next: on q, k, v)
    ssm_inner: int = 0             # E = expand * d_model
    ssm_state: int = 16            # N
    d_conv: int = 4


def cache_bytes(c: Layers, T: int, p: int = 2) -> int:
    """Bytes one sequence of T tokens keeps between decoding steps."""
    kv_per_token = 2 * c.n_kv * c.d_head                       # K and V
    full = c.full * kv_per_token * T
    sliding = c.sliding * kv_per_token * min(T, c.window)
    linear = c.linear * (c.lin_heads * (c.lin_dk * c.lin_dv + (c.lin_dk if c.lin_normaliser else 0))
                         + c.lin_conv_channels * (c.d_conv - 1))
    ssm = c.ssm * c.ssm_inner * (c.ssm_state + c.d_conv - 1)
    return (full + sliding + linear + ssm) * p
# --8<-- [end:memory]


# --8<-- [start:models]
MODELS = {   # from the papers and model cards on the page; tests check them against transformers' configs
    "Llama-2-7B (full)": Layers(full=32, n_kv=32, d_head=128),
    "Mistral-7B (full)": Layers(full=32, n_kv=8, d_head=128),
    "Mistral-7B (SWA 4096)": Layers(sliding=32, n_kv=8, d_head=128, window=4096),
    "Jamba-v0.1 (1:7)": Layers(full=4, ssm=28, n_kv=8, d_head=128, ssm_inner=8192, ssm_state=16, d_conv=4),
    "Qwen3-Next-80B-A3B (3:1)": Layers(full=12, linear=36, n_kv=2, d_head=256, lin_heads=32,
                                       lin_dk=128, lin_dv=128, lin_normaliser=False,
                                       lin_conv_channels=2 * 16 * 128 + 32 * 128),
}


def nsa_tokens_read(T, d=16, l_sel=64, n=16, w=512):
    """Tokens one NSA decoding step loads (Yuan et al. 2025, Table 4): about T / d compressed
    tokens (exactly floor((T - l) / d) + 1 for blocks of l), n selected blocks of l_sel tokens,
    and the w-token window."""
    return T // d + n * l_sel + w


def dsa_bytes_read(T, k=2048, mla_bytes=1152, index_bytes=132):
    """Bytes one DSA decoding step reads per layer: the lightning indexer scans every key
    (128 fp8 values + one fp32 scale in the reference code), attention reads only the top-k
    MLA entries (576 bf16 values). Full MLA reads all T entries."""
    return T * index_bytes + min(k, T) * mla_bytes
# --8<-- [end:models]
