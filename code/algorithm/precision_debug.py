"""Precision debugging of docs/algorithm/precision-debugging.md: a small Transformer with switchable
numerically fragile implementations, a hook-based layer-by-layer comparator against a float64 reference,
per-layer sensitivity ranking, dynamic loss scaling and low-precision weight updates.

tests/test_algorithm_precision_debug.py and notebooks/algorithm/precision-debugging-lab.ipynb check it.
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn

LOW = (torch.float16, torch.bfloat16)


# --8<-- [start:tolerance]
def unit_roundoff(dtype: torch.dtype) -> float:
    """u = eps / 2 for round-to-nearest: fp16 2^-11, bf16 2^-8, fp32 2^-24, fp64 2^-53."""
    return torch.finfo(dtype).eps / 2


def reduction_error(k: int, dtype: torch.dtype, worst: bool = False) -> float:
    """Relative error of a length-k sum or dot product accumulated in `dtype` (Higham):
    worst case gamma_k = k u / (1 - k u); typical (independent rounding errors) about sqrt(k) u."""
    u = unit_roundoff(dtype)
    if not worst:
        return math.sqrt(k) * u
    return k * u / (1 - k * u) if k * u < 1 else math.inf   # k u >= 1: the bound says nothing


def created_tolerance(dtype: torch.dtype, k: int, acc: torch.dtype = torch.float32, safety: float = 4.0) -> float:
    """Tolerance for the normwise error that one module creates: its weights rounded to `dtype` (u),
    length-k reductions accumulated in `acc` (typical sqrt(k) u_acc), its output rounded (u); times a
    safety factor. CPU and GPU kernels for fp16/bf16 accumulate matmuls and sums in fp32."""
    return safety * (2.0 * unit_roundoff(dtype) + math.sqrt(k) * unit_roundoff(acc))
# --8<-- [end:tolerance]


# --8<-- [start:model]
class LayerNorm(nn.Module):
    """LayerNorm with switchable statistics: two-pass in at least fp32 (torch's own kernels also accumulate
    in fp32, with Welford) or the one-pass formula E[x^2] - E[x]^2 in the input dtype (catastrophic
    cancellation)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps
        self.one_pass = False

    def forward(self, x):
        if self.one_pass:
            mean = x.mean(-1, keepdim=True)
            var = (x * x).mean(-1, keepdim=True) - mean * mean
            y = (x - mean) * torch.rsqrt(var + self.eps)
        else:
            xa = x.to(torch.promote_types(x.dtype, torch.float32))
            mean = xa.mean(-1, keepdim=True)
            var = ((xa - mean) ** 2).mean(-1, keepdim=True)
            y = ((xa - mean) * torch.rsqrt(var + self.eps)).to(x.dtype)
        return y * self.weight + self.bias


class Softmax(nn.Module):
    """Row softmax; subtract_max=False is the naive formula that overflows (fp16: logits > 11.09)."""

    def __init__(self):
        super().__init__()
        self.subtract_max = True

    def forward(self, s):
        if self.subtract_max:
            s = s - s.amax(-1, keepdim=True)
        e = torch.exp(s)
        return e / e.sum(-1, keepdim=True)


class Scores(nn.Module):
    """Attention logits q k^T / sqrt(d); scaling after the product lets q k^T overflow fp16 (65504)."""

    def __init__(self, d_head: int):
        super().__init__()
        self.scale, self.scale_q_first = d_head ** -0.5, True

    def forward(self, q, k):
        if self.scale_q_first:
            return (q * self.scale) @ k.transpose(-2, -1)
        return (q @ k.transpose(-2, -1)) * self.scale


class Mix(nn.Module):
    """Attention-weighted sum of the values, P V."""

    def forward(self, p, v):
        return p @ v


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.scores, self.softmax, self.mix = Scores(self.dh), Softmax(), Mix()

    def forward(self, x):
        b, t, d = x.shape
        split = lambda z: z.view(b, t, self.h, self.dh).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        y = self.mix(self.softmax(self.scores(q, k)), v)
        return self.o(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.attn, self.ln2 = LayerNorm(d), Attention(d, heads), LayerNorm(d)
        self.fc1, self.act, self.fc2 = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TinyTransformer(nn.Module):
    """Pre-norm Transformer on continuous inputs (b, t, d) with a classification head on the last token."""

    def __init__(self, d: int = 64, heads: int = 4, layers: int = 3, classes: int = 10):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.head = LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))[:, -1]


def make_model(seed: int = 0, **kw) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer(**kw).double().eval()
# --8<-- [end:model]


# --8<-- [start:compare]
def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Normwise relative error ||a - ref|| / ||ref|| in float64; inf when a has inf or NaN."""
    a, ref = a.double(), ref.double()
    if not torch.isfinite(a).all():
        return math.inf
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def _leaves(model):
    return [(n, m) for n, m in model.named_modules() if n and not list(m.children())]


def record(model, *inputs):
    """Run the model once; return {leaf name: (inputs, output)} in execution order."""
    seen = {}

    def keep(mod, args, out, name):          # a forward hook must return None, or it replaces the output
        seen.setdefault(name, (tuple(a.detach() for a in args), out.detach()))

    _forward_with_hooks(model, inputs, keep)
    return seen


def _forward_with_hooks(model, inputs, fn):
    """One no-grad forward with fn(module, args, output, name) hooked on every leaf module."""
    hooks = [mod.register_forward_hook(lambda m, a, o, name=name: fn(m, a, o, name))
             for name, mod in _leaves(model)]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()


def compare_layers(ref_model, test_model, x, dtype, tol):
    """Per leaf module: total error of its output against the float64 run, and the error the module
    itself creates (the float64 copy replayed on the low-precision run's own inputs, upcast exactly).
    total = created + inherited; the first module whose created error exceeds tol is the culprit."""
    ref_run = record(ref_model, x.double())
    test_run = record(test_model, x.to(dtype))
    ref_mods, rows, culprit = dict(ref_model.named_modules()), [], None
    for name, (args, out) in test_run.items():
        with torch.no_grad():
            replay = ref_mods[name](*(a.double() for a in args))
        created = rel_err(out, replay)
        rows.append({"layer": name, "total": rel_err(out, ref_run[name][1]), "created": created})
        if culprit is None and not created <= tol:
            culprit = name
    return rows, culprit


def first_nonfinite(model, *inputs):
    """Forward hooks that stop at the first module whose output has inf or NaN; returns its name."""
    found = []

    def check(mod, args, out, name):
        if not found and not torch.isfinite(out).all():
            found.append(name)

    _forward_with_hooks(model, inputs, check)
    return found[0] if found else None
# --8<-- [end:compare]


def cast_model(model, dtype):
    return copy.deepcopy(model).to(dtype)


# --8<-- [start:bisect]
def keep_in_high_precision(model, names, high=torch.float64):
    """Mixed precision by hand: the named modules run in `high`, their inputs cast up and output cast
    back to the dtype of the incoming activation. Used to bisect: which upcast module removes the error?"""
    mods = dict(model.named_modules())
    for name in names:
        mod = mods[name].to(high)
        state = {}

        def pre(m, args, state=state):
            state["dtype"] = args[0].dtype
            return tuple(a.to(high) for a in args)

        mod.register_forward_pre_hook(pre)
        mod.register_forward_hook(lambda m, args, out, state=state: out.to(state["dtype"]))
    return model


def fake_quant(w: torch.Tensor, bits: int = 4, per_channel: bool = False) -> torch.Tensor:
    """Symmetric round-to-nearest fake quantization, one scale per tensor or per output row."""
    qmax = 2 ** (bits - 1) - 1
    amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().amax()
    s = amax.clamp_min(1e-12) / qmax
    return (w / s).round().clamp(-qmax - 1, qmax) * s


def layer_sensitivity(model, x, perturb, metric):
    """Perturb one Linear at a time (e.g. quantize it) and rank layers by the change of `metric`
    (a loss against the unperturbed model's outputs). Returns [(name, metric)] sorted, worst first."""
    with torch.no_grad():
        ref = model(x)
    scores = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            saved = mod.weight.detach().clone()
            with torch.no_grad():
                mod.weight.copy_(perturb(saved))
                scores.append((name, metric(model(x), ref)))
                mod.weight.copy_(saved)
    return sorted(scores, key=lambda s: -s[1])
# --8<-- [end:bisect]


# --8<-- [start:scaler]
class LossScaler:
    """Dynamic loss scaling as torch.amp.GradScaler does it: multiply the loss by S; if any gradient is
    inf/NaN, skip the step and S *= backoff; after `interval` clean steps in a row, S *= growth."""

    def __init__(self, init=2.0 ** 16, growth=2.0, backoff=0.5, interval=2000):
        self.scale, self.growth, self.backoff, self.interval, self.good = init, growth, backoff, interval, 0

    def unscale_and_check(self, grads):
        """fp32 gradients divided by S, and whether all were finite (the step may be taken)."""
        out = [g.float() / self.scale for g in grads]
        return out, all(torch.isfinite(g).all() for g in out)

    def update(self, finite: bool):
        if not finite:
            self.scale *= self.backoff
            self.good = 0
        else:
            self.good += 1
            if self.good == self.interval:
                self.scale *= self.growth
                self.good = 0
# --8<-- [end:scaler]


# --8<-- [start:updates]
def round_stochastic_bf16(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """fp32 -> bf16 with stochastic rounding: add uniform random low 16 bits, then truncate."""
    bits = x.float().contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, generator=gen, dtype=torch.int32)
    return ((bits + noise) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)


def sgd_bf16(w0: float, update: float, steps: int, mode: str, seed: int = 0) -> float:
    """Apply w <- w - update `steps` times with bf16 weights. mode: 'naive' (round every step),
    'master' (fp32 master copy, bf16 cast for compute), 'kahan' (bf16 compensation buffer),
    'stochastic' (stochastic rounding of each new weight)."""
    w = torch.tensor([w0], dtype=torch.bfloat16)
    master, comp = w.float(), torch.zeros(1, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if mode == "naive":
            w = (w.float() - update).to(torch.bfloat16)
        elif mode == "master":
            master = master - update
            w = master.to(torch.bfloat16)
        elif mode == "kahan":
            y = -update - comp.float()            # the step plus what earlier roundings lost
            t = (w.float() + y).to(torch.bfloat16)
            comp = ((t.float() - w.float()) - y).to(torch.bfloat16)
            w = t
        elif mode == "stochastic":
            w = round_stochastic_bf16(w.float() - update, gen)
        else:
            raise ValueError(mode)
    return w.float().item()
# --8<-- [end:updates]
