"""FP8 training as its recipes describe it, emulated exactly on the CPU and run for real on a GPU.

Quantise/dequantise with torch.float8_e4m3fn / float8_e5m2 and an explicit clamp (saturation does
not depend on the framework's cast), scales at three granularities (tensor-wise, row-wise, DeepSeek-V3's
1x128 / 128x128 blocks), a scaled GEMM emulated as dequantise -> fp32 matmul (the same arithmetic as
torch._scaled_mm, which the tests compare on the CPU and the lab on a GPU), an nn.Linear swap whose three
GEMMs (forward, grad-input, grad-weight) go through FP8, and Transformer Engine's delayed scaling
(amax history) against current scaling. Used by docs/framework/fp8-training.md, its lab
notebooks/framework/fp8-training-lab.ipynb and bench/experiments/fp8_training.py; tested by
tests/test_framework_fp8.py.
"""
from __future__ import annotations

import math

import torch

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
FMAX = {E4M3: 448.0, E5M2: 57344.0}   # largest finite value of each format
MANT = {E4M3: 3, E5M2: 2}             # explicit mantissa bits
EMIN = {E4M3: -6, E5M2: -14}          # exponent of the smallest normal number


# --8<-- [start:quant]
def amax_to_scale(amax: torch.Tensor, dtype, pow2: bool = False) -> torch.Tensor:
    """Decode scale s = amax / FMAX: x / s fits the format and x ~ s * q. With pow2 the scale is rounded
    UP to a power of two (never overflows; the mantissas of x / s are those of x)."""
    s = amax.float().clamp_min(1e-30) / FMAX[dtype]
    return torch.exp2(torch.ceil(torch.log2(s))) if pow2 else s


def quantize(x: torch.Tensor, s: torch.Tensor, dtype) -> torch.Tensor:
    """x / s rounded to nearest-even in the FP8 format; values beyond the format saturate to +-FMAX."""
    return (x.float() / s).clamp(-FMAX[dtype], FMAX[dtype]).to(dtype)


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return q.float() * s


def roundtrip_bound(x: torch.Tensor, s: torch.Tensor, dtype) -> torch.Tensor:
    """Largest |x - dequantize(quantize(x))| for |x| <= s * FMAX: half an ulp. A normal number has
    ulp 2^(e - m) <= 2^-m |x|; below 2^EMIN (subnormals) the spacing is the constant 2^(EMIN - m), times s."""
    m = MANT[dtype]
    return torch.maximum(x.abs() * 2.0 ** -(m + 1), s * 2.0 ** (EMIN[dtype] - m - 1))
# --8<-- [end:quant]


# --8<-- [start:granularity]
def _blocks(shape, block):
    """A block of (br, bc) elements; None spans the whole dimension."""
    return tuple(n if b is None else b for n, b in zip(shape, block))


def group_amax(x: torch.Tensor, block) -> torch.Tensor:
    """amax of every block of a 2-D tensor, shape (ceil(r / br), ceil(c / bc)); ragged edges are padded
    with zeros (they do not change a maximum of absolute values)."""
    (r, c), (br, bc) = x.shape, _blocks(x.shape, block)
    R, C = -(-r // br) * br, -(-c // bc) * bc
    a = torch.nn.functional.pad(x.detach().abs().float(), (0, C - c, 0, R - r))
    return a.view(R // br, br, C // bc, bc).amax(dim=(1, 3))


def expand_scales(s: torch.Tensor, block, shape) -> torch.Tensor:
    br, bc = _blocks(shape, block)
    return s.repeat_interleave(br, 0).repeat_interleave(bc, 1)[: shape[0], : shape[1]]


def mx_floor_scale(amax: torch.Tensor, dtype) -> torch.Tensor:
    """OCP MX v1.0's shared scale: X = 2^(floor(log2 amax) - emax), emax the exponent of the element format's
    largest normal (8 for E4M3). amax / X lands in [256, 512), so a block maximum above 448 is clipped."""
    emax = math.floor(math.log2(FMAX[dtype]))
    return torch.exp2(torch.floor(torch.log2(amax.float().clamp_min(1e-30))) - emax)


def quantize_blocks(x: torch.Tensor, block, dtype, pow2: bool = False, mx_floor: bool = False):
    """One scale per block: returns the FP8 tensor and the per-block decode scales. pow2 rounds
    amax / FMAX up to a power of two (MXFP8's "RCEIL"); mx_floor uses the OCP spec's floor rule."""
    amax = group_amax(x, block)
    s = mx_floor_scale(amax, dtype) if mx_floor else amax_to_scale(amax, dtype, pow2)
    return quantize(x, expand_scales(s, block, x.shape), dtype), s


def dequantize_blocks(q: torch.Tensor, s: torch.Tensor, block) -> torch.Tensor:
    return dequantize(q, expand_scales(s, block, q.shape))


# For C = A @ B with A (m, k) and B (k, n) the contraction runs along A's rows and B's columns.
# tensor: one scale each. row: one per row of A and per column of B, spanning all of k (torchao's
# "rowwise", cuBLAS/CUTLASS row-wise kernels). block: DeepSeek-V3 - 1x128 tiles along k for activations
# and gradients, 128x128 blocks for weights (a weight block is also a block of the transposed weight).
# mx: Blackwell's MXFP8, 32 consecutive elements along k share a power-of-two (E8M0) scale, for every operand.
def operand_blocks(granularity: str, side: str, weight: bool):
    if granularity == "mx":
        return (1, 32) if side == "a" else (32, 1)
    if granularity == "tensor":
        return (None, None)
    if granularity == "row":
        return (1, None) if side == "a" else (None, 1)
    if granularity == "block":
        if weight:
            return (128, 128)
        return (1, 128) if side == "a" else (128, 1)
    raise ValueError(granularity)
# --8<-- [end:granularity]


# --8<-- [start:gemm]
def fp8_gemm(a: torch.Tensor, b: torch.Tensor, granularity: str, dtype_a=E4M3, dtype_b=E4M3,
             a_weight: bool = False, b_weight: bool = False, pow2: bool = False) -> torch.Tensor:
    """C = A @ B with both operands quantised at `granularity`, emulated as dequantise -> fp32 matmul.
    A Tensor Core multiplies the FP8 values exactly and accumulates in (nominally) fp32, applying the
    scales per K-block in the epilogue or the main loop; the result differs from this emulation only by
    the order and precision of the accumulation (checked against torch._scaled_mm)."""
    ba, bb = operand_blocks(granularity, "a", a_weight), operand_blocks(granularity, "b", b_weight)
    qa, sa = quantize_blocks(a, ba, dtype_a, pow2)
    qb, sb = quantize_blocks(b, bb, dtype_b, pow2)
    return dequantize_blocks(qa, sa, ba) @ dequantize_blocks(qb, sb, bb)


def scaled_mm_emulated(qa, sa, qb, sb) -> torch.Tensor:
    """torch._scaled_mm's arithmetic for tensor-wise (0-d scales) and row-wise ((m, 1), (1, n)) scales."""
    return (qa.float() * sa) @ (qb.float() * sb)


def scaled_mm_gemm(a, b, granularity: str, dtype_a=E4M3, dtype_b=E4M3, pow2: bool = False,
                   out_dtype=torch.bfloat16) -> torch.Tensor:
    """The real thing: torch._scaled_mm (cuBLAS/CUTLASS FP8 GEMM; CUDA sm_89+, and the CPU in torch 2.13).
    A must be row-major and B column-major; scales are fp32, 0-d (tensor-wise) or (m, 1) and (1, n)."""
    if granularity == "tensor":
        sa, sb = amax_to_scale(a.abs().amax(), dtype_a, pow2), amax_to_scale(b.abs().amax(), dtype_b, pow2)
    elif granularity == "row":
        sa = amax_to_scale(a.abs().amax(1, keepdim=True), dtype_a, pow2)
        sb = amax_to_scale(b.abs().amax(0, keepdim=True), dtype_b, pow2)
    else:
        raise ValueError(f"{granularity}: torch._scaled_mm takes tensor-wise or row-wise scales")
    qa = quantize(a, sa, dtype_a).contiguous()
    qb = quantize(b, sb, dtype_b).t().contiguous().t()        # column-major
    return torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=out_dtype)
# --8<-- [end:gemm]


def int8_fake_quant(x: torch.Tensor) -> torch.Tensor:
    """Per-tensor symmetric INT8 for contrast: a uniform grid of step amax / 127, so the error of every
    element grows with the largest one (FP8's relative grid does not)."""
    s = x.abs().max().clamp_min(1e-30) / 127
    return (x / s).round().clamp(-127, 127) * s


# ---- recipes: which format and granularity each of a linear layer's three GEMMs uses ----
RECIPES = {
    # torchao "tensorwise" / Transformer Engine HYBRID: E4M3 forward, E5M2 for the output gradient
    "tensor": dict(granularity="tensor", x=E4M3, w=E4M3, g=E5M2, pow2=False),
    # torchao "rowwise": E4M3 everywhere, scales rounded to powers of two
    "row": dict(granularity="row", x=E4M3, w=E4M3, g=E4M3, pow2=True),
    # DeepSeek-V3: E4M3 everywhere, 1x128 tiles for activations/gradients, 128x128 for weights
    "block": dict(granularity="block", x=E4M3, w=E4M3, g=E4M3, pow2=False),
    # MXFP8 (Blackwell): E4M3 elements, one E8M0 scale per 32 along K, amax / 448 rounded up ("RCEIL")
    "mxfp8": dict(granularity="mx", x=E4M3, w=E4M3, g=E4M3, pow2=True),
}


def _bf16(t):
    return t.bfloat16().float()


# --8<-- [start:linear]
def _gemm(a, b, r: dict, backend: str, dtype_a, dtype_b, b_weight: bool):
    if backend == "scaled_mm":
        return scaled_mm_gemm(a, b, r["granularity"], dtype_a, dtype_b, r["pow2"])
    return fp8_gemm(a, b, r["granularity"], dtype_a, dtype_b, b_weight=b_weight, pow2=r["pow2"])


class _LinearFn(torch.autograd.Function):
    """y = x W^T, dx = dy W, dW = dy^T x: all three GEMMs in FP8 (recipe) or BF16 ("bf16")."""

    @staticmethod
    def forward(ctx, x, w, recipe, backend):
        ctx.save_for_backward(x, w)  # kept in high precision: the backward re-quantises along its own K
        ctx.recipe, ctx.backend = recipe, backend
        if recipe == "bf16":
            return _bf16(x) @ _bf16(w).t()
        r = RECIPES[recipe]
        return _gemm(x, w.t(), r, backend, r["x"], r["w"], b_weight=True)                # Fprop

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        if ctx.recipe == "bf16":
            return _bf16(gy) @ _bf16(w), _bf16(gy).t() @ _bf16(x), None, None
        r = RECIPES[ctx.recipe]
        dx = _gemm(gy, w, r, ctx.backend, r["g"], r["w"], b_weight=True)       # Dgrad: K = out features
        dw = _gemm(gy.t(), x, r, ctx.backend, r["g"], r["x"], b_weight=False)  # Wgrad: K = tokens
        return dx.to(x.dtype), dw.to(w.dtype), None, None


class Fp8Linear(torch.nn.Module):
    """Drop-in replacement for nn.Linear (shares its parameters): the matmuls go through `recipe`,
    the bias add stays in high precision; the weight itself stays fp32 (the master copy). backend
    "emulate" runs anywhere; "scaled_mm" calls torch._scaled_mm (tensor-wise and row-wise recipes)."""

    def __init__(self, linear: torch.nn.Linear, recipe: str, backend: str = "emulate"):
        super().__init__()
        self.weight, self.bias, self.recipe, self.backend = linear.weight, linear.bias, recipe, backend

    def forward(self, x):
        y = _LinearFn.apply(x.reshape(-1, x.shape[-1]), self.weight, self.recipe, self.backend)
        y = y.reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


def swap_linears(model: torch.nn.Module, recipe: str, skip=("head",), backend: str = "emulate") -> list[str]:
    """Replace every nn.Linear except those named in `skip` (the output head stays high precision)."""
    swapped = []
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, torch.nn.Linear) and child_name not in skip:
                setattr(mod, child_name, Fp8Linear(child, recipe, backend))
                swapped.append(full)
    return swapped
# --8<-- [end:linear]


# --8<-- [start:delayed]
class DelayedScaler:
    """Transformer Engine's DelayedScaling for one tensor: the scale used at step t comes from the amax
    history of earlier steps, s = max(history) * 2^margin / FMAX; the amax of step t is recorded after the
    cast (in TE, by the kernel that does the cast), so the tensor is read once. Step 0 has no history and
    uses its own amax."""

    def __init__(self, history_len: int = 16, margin: int = 0, dtype=E4M3, algo: str = "max"):
        self.history_len, self.margin, self.dtype, self.algo = history_len, margin, dtype, algo
        self.history: list[float] = []

    def scale(self) -> float | None:
        if not self.history:
            return None
        amax = max(self.history) if self.algo == "max" else self.history[-1]
        return amax * 2.0 ** self.margin / FMAX[self.dtype]

    def __call__(self, x: torch.Tensor):
        amax = float(x.abs().max())
        s = self.scale() or amax / FMAX[self.dtype]
        q = quantize(x, torch.tensor(s), self.dtype)
        clipped = int((x.abs() > s * FMAX[self.dtype]).sum())
        self.history = (self.history + [amax])[-self.history_len:]
        return q, s, clipped


def current_scaling(x: torch.Tensor, dtype=E4M3):
    """torchao's default (dynamic) scaling: read the tensor for its amax, then cast. Never clips."""
    s = float(x.abs().max()) / FMAX[dtype]
    return quantize(x, torch.tensor(s), dtype), s, 0
# --8<-- [end:delayed]


def rel_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx - exact).detach().norm() / exact.detach().norm())


def outlier_activations(m: int = 256, k: int = 512, channel_scale: float = 20.0, massive: float = 3e4,
                        seed: int = 0):
    """Activations shaped like an LLM's: a Gaussian body, a few channels ~20x larger in every token
    (Dettmers et al., LLM.int8()), and two 'massive activations' ~1e4-1e5x the body on two tokens
    (Sun et al., 2024). Returns the tensor and a mask of the body (non-outlier) elements."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    body = torch.ones(m, k, dtype=torch.bool)
    channels = torch.tensor([17, 300, 301, 450]) % k
    x[:, channels] *= channel_scale
    body[:, channels] = False
    for tok, ch, sign in ((0, 17, 1.0), (m // 3, 300 % k, -0.7)):
        x[tok, ch] = sign * massive
    body[[0, m // 3]] = False
    return x, body


def _chain(vocab: int, seed: int, peak: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(peak * torch.randn(vocab, vocab, generator=g), -1)


def markov_corpus(n: int, vocab: int, seed: int = 0, peak: float = 3.0) -> torch.Tensor:
    """A first-order Markov chain: next token ~ softmax(peak * z[prev]) for a random z per previous token.
    Its entropy is well below log(vocab), so a small GPT has something to learn in a hundred steps."""
    cdf = _chain(vocab, seed, peak).cumsum(-1)
    u = torch.rand(n, generator=torch.Generator().manual_seed(seed + 1))
    out = torch.zeros(n, dtype=torch.long)
    for i in range(1, n):
        out[i] = min(int(torch.searchsorted(cdf[out[i - 1]], u[i])), vocab - 1)
    return out


def chain_entropy(vocab: int, seed: int = 0, peak: float = 3.0) -> float:
    """Average next-token entropy of markov_corpus's chain over a uniform previous token (nats): the
    floor a model's loss approaches (the stationary distribution is not uniform, so roughly)."""
    p = _chain(vocab, seed, peak)
    return float(-(p * p.log()).sum(-1).mean())


def train_gpt(recipe: str, steps: int, corpus: torch.Tensor, vocab: int, layers: int = 2, h: int = 128,
              heads: int = 4, seq: int = 64, batch: int = 8, lr: float = 3e-3, seed: int = 0) -> list[float]:
    """A short CPU training run of gpt_train.GPT with its block linears swapped to `recipe` ("fp32",
    "bf16", "tensor", "row", "block"). Same init, same batches for every recipe. Returns the losses."""
    import gpt_train

    torch.manual_seed(seed)
    model = gpt_train.GPT(layers, h, heads, vocab, p=0.0)
    if recipe != "fp32":
        swap_linears(model, recipe)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    for step in range(steps):
        starts = torch.randint(0, len(corpus) - seq - 1, (batch,), generator=g)
        win = torch.stack([corpus[s:s + seq + 1] for s in starts.tolist()], 1)  # [s+1, b]
        logits = model(win[:-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), win[1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
