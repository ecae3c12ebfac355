"""Optimisers as large-model training uses them (docs/algorithm/optimizers-at-scale.md).

Muon written by hand (momentum, then Newton-Schulz orthogonalisation of the update of each 2-D
hidden weight), the parameter split between Muon and AdamW and the weight-decay groups, the
optimiser-state bytes counted from the optimiser's own tensors, the memory traffic of an AdamW
step in its for-loop, foreach and fused forms, one Adam step under standard and muP learning
rates, and the gradient noise scale of McCandlish et al. Checked in tests/test_algorithm_muon.py
and notebooks/algorithm/muon-lab.ipynb against torch.optim.Muon, torch.optim.AdamW and the SVD.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode


# --8<-- [start:ns]
MUON_COEFFS = (3.4445, -4.7750, 2.0315)   # quintic of Keller Jordan's post: maximal slope at 0


def newton_schulz(G, steps=5, coeffs=MUON_COEFFS, eps=1e-7, dtype=torch.bfloat16):
    """Approximate the polar factor U V^T of G = U S V^T: each step maps every singular value
    s -> a s + b s^3 + c s^5 and leaves the singular vectors alone. Only matrix multiplies, in bf16."""
    a, b, c = coeffs
    X = G.to(dtype)
    tall = G.size(0) > G.size(1)
    if tall:
        X = X.T                                # keep the Gram matrix X X^T the small one
    X = X / X.norm().clamp(min=eps)            # Frobenius >= spectral norm: every s <= 1
    for _ in range(steps):
        A = X @ X.T
        B = torch.addmm(A, A, A, beta=b, alpha=c)          # b A + c A^2
        X = torch.addmm(X, B, X, beta=a)                   # a X + (b A + c A^2) X
    return X.T if tall else X


def polar_factor(G):
    """The exact orthogonalisation U V^T from the SVD (what Newton-Schulz approximates)."""
    U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
    return U @ Vh
# --8<-- [end:ns]


# --8<-- [start:muon]
class Muon(torch.optim.Optimizer):
    """Muon for 2-D hidden weights: B <- mu B + (1 - mu) G; with Nesterov the update direction is
    (1 - mu) G + mu B; O = NewtonSchulz(direction); W <- (1 - lr wd) W - lr * scale(shape) * O.
    The only state is one momentum buffer per matrix."""

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True, ns_steps=5,
                 adjust_lr="original"):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_steps=ns_steps, adjust_lr=adjust_lr))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon is for matrices; got a parameter of shape {tuple(p.shape)}")

    @staticmethod
    def lr_scale(shape, how):
        rows, cols = shape
        if how == "original":                  # Keller Jordan: sqrt(max(1, rows / cols))
            return math.sqrt(max(1.0, rows / cols))
        if how == "match_rms_adamw":           # Moonshot: 0.2 sqrt(max(rows, cols)) -> update RMS 0.2
            return 0.2 * math.sqrt(max(rows, cols))
        return 1.0

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            mu = g["momentum"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - mu)                          # EMA of the gradients
                direction = p.grad.lerp(buf, mu) if g["nesterov"] else buf
                O = newton_schulz(direction, g["ns_steps"])
                p.mul_(1 - g["lr"] * g["weight_decay"])            # decoupled weight decay
                p.add_(O, alpha=-g["lr"] * self.lr_scale(p.shape, g["adjust_lr"]))


def ns_flop_overhead(m, n, steps, batch_tokens):
    """Newton-Schulz FLOPs over the training FLOPs of one m x n weight (m <= n) per step:
    steps (4 m^2 n + 2 m^3) against 6 m n B. Never more than steps * m / B."""
    m, n = min(m, n), max(m, n)
    return steps * (4 * m * m * n + 2 * m ** 3) / (6 * m * n * batch_tokens)
# --8<-- [end:muon]


# --8<-- [start:groups]
def _unique(named):
    seen, out = set(), []
    for name, p in named:
        if p.requires_grad and id(p) not in seen:     # a tied weight counts once
            seen.add(id(p))
            out.append((name, p))
    return out


def embedding_param_ids(model):
    return {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}


def adamw_param_groups(model, weight_decay, decay_embeddings=False):
    """The usual default: decay the matrices of matrix multiplies, not biases or normalisation gains
    (ndim < 2); embeddings by choice (nanoGPT decays every 2-D tensor, OLMo 2 exempts embeddings)."""
    emb = embedding_param_ids(model)
    decay, no_decay = [], []
    for _, p in _unique(model.named_parameters()):
        if p.ndim >= 2 and (decay_embeddings or id(p) not in emb):
            decay.append(p)
        else:
            no_decay.append(p)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]


def muon_split(model, head_names=("lm_head",)):
    """Muon gets the 2-D weights of the hidden layers; the embedding, the LM head (input and
    output layers) and every vector or scalar stay with AdamW."""
    emb = embedding_param_ids(model)
    head = {id(p) for name, p in model.named_parameters() if name.split(".")[0] in head_names}
    muon, adamw = [], []
    for _, p in _unique(model.named_parameters()):
        (muon if p.ndim == 2 and id(p) not in emb and id(p) not in head else adamw).append(p)
    return muon, adamw
# --8<-- [end:groups]


# --8<-- [start:memory]
def state_bytes(*optimizers):
    """Bytes of every tensor the optimisers keep in their state (moments, momentum, step counters)."""
    return sum(v.nbytes for opt in optimizers for s in opt.state.values() for v in s.values()
               if torch.is_tensor(v))


def adamw_state_formula(n_params, n_tensors, p=4):
    """exp_avg and exp_avg_sq (p bytes each per parameter) plus one fp32 step counter per tensor."""
    return 2 * p * n_params + 4 * n_tensors


def muon_state_formula(n_params, p=4):
    return p * n_params                      # one momentum buffer


def training_bytes_per_param(optimizer):
    """Mixed precision (bf16 weights and gradients, fp32 master weights and optimiser state)."""
    weights, grads, master = 2, 2, 4
    return weights + grads + master + {"adamw": 4 + 4, "muon": 4, "sgd": 0}[optimizer]
# --8<-- [end:memory]


# --8<-- [start:traffic]
class TrafficCounter(TorchDispatchMode):
    """Count the ATen ops an optimiser step dispatches and the bytes they would move if each op
    streamed its operands through memory once: every tensor argument is read, every argument the
    op's schema marks as written and every returned tensor is written."""

    def __init__(self):
        super().__init__()
        self.ops, self.read, self.written = 0, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace != "aten":
            return out
        self.ops += 1
        values = dict(zip([a.name for a in func._schema.arguments], args)) | kwargs
        for arg in func._schema.arguments:
            v = values.get(arg.name)
            tensors = [v] if torch.is_tensor(v) else [t for t in v if torch.is_tensor(t)] \
                if isinstance(v, (list, tuple)) else []
            nbytes = sum(t.nbytes for t in tensors)
            self.read += nbytes
            if arg.alias_info is not None and arg.alias_info.is_write:
                self.written += nbytes
        if not any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments):
            results = out if isinstance(out, (list, tuple)) else [out]
            self.written += sum(t.nbytes for t in results if torch.is_tensor(t))
        return out


def adamw_step_traffic(params, **impl):
    """Ops and bytes of the second AdamW step (the first allocates the state) on `params`."""
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, **impl)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    with TrafficCounter() as c:
        opt.step()
    return c
# --8<-- [end:traffic]


# --8<-- [start:mup]
def adam_first_step_output_change(width, lr, seed=0):
    """A hidden layer y = W x of width n gets the rank-1 gradient g x^T. Adam's first step is
    -lr * sign(g x^T), so the output moves by lr * sum_j |x_j| ~ lr * n per unit: the learning
    rate must shrink like 1 / n (muP) for the change to stay O(1). Returns the RMS of dW x."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(width, generator=gen, dtype=torch.float64)
    g = torch.randn(width, generator=gen, dtype=torch.float64)
    W = nn.Parameter(torch.randn(width, width, generator=gen, dtype=torch.float64) / math.sqrt(width))
    W0 = W.detach().clone()
    W.grad = torch.outer(g, x)
    torch.optim.Adam([W], lr=lr, eps=1e-30).step()
    return ((W.detach() - W0) @ x).pow(2).mean().sqrt().item()
# --8<-- [end:mup]


# --8<-- [start:noise]
def noise_scale_exact(per_example_grads):
    """B_simple = tr(Sigma) / |G|^2 from the per-example gradients (rows), McCandlish et al. section 2."""
    G = per_example_grads.mean(0)
    trace = per_example_grads.var(0, unbiased=False).sum()
    return (trace / G.pow(2).sum()).item()


def noise_scale_two_batches(sq_small, b_small, sq_big, b_big):
    """Unbiased estimates of |G|^2 and tr(Sigma) from the squared norms of gradients averaged over
    batches of two sizes (McCandlish et al., Appendix A): E|G_B|^2 = |G|^2 + tr(Sigma) / B."""
    g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    trace = (sq_small - sq_big) / (1 / b_small - 1 / b_big)
    return g2, trace, trace / g2


def optimal_lr_and_gain(batch, noise_scale):
    """For SGD on a locally quadratic loss: eps_opt(B) / eps_max = 1 / (1 + B_noise / B), and the
    best loss decrease per step scales the same way (McCandlish et al., section 2)."""
    return 1.0 / (1.0 + noise_scale / batch)


def scale_hyperparameters(tokens, ref_tokens, ref_batch, ref_lr, ref_wd, batch=None):
    """nanochat's rules (scripts/base_train.py): batch ~ D^0.383 rounded to a power of two, Adam-style
    learning rate ~ sqrt(B / B_ref), weight decay ~ sqrt(B / B_ref) * D_ref / D, which keeps
    T_epoch = B / (lr * wd * D) at its reference value."""
    if batch is None:
        batch = 2 ** round(math.log2(ref_batch * (tokens / ref_tokens) ** 0.383))
    lr = ref_lr * math.sqrt(batch / ref_batch)
    wd = ref_wd * math.sqrt(batch / ref_batch) * ref_tokens / tokens
    return batch, lr, wd
# --8<-- [end:noise]
