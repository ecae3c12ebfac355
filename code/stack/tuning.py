"""The model and the optimisation ladder of docs/stack/tuning-case-study.md.

A small pre-LN GPT (no dropout) whose attention is either written by hand, as a first port would
write it (bmm, masked softmax, bmm), or `F.scaled_dot_product_attention(is_causal=True)`; one
"rung" of the ladder is a config of five switches (TF32, bf16 autocast, SDPA, fused AdamW,
torch.compile) and `build` turns it into a model, an optimizer and a training step. The fp64
reference, the tolerances derived from unit roundoff and the FLOP count live here too, so that
tests/test_stack_tuning.py checks on the CPU what bench/experiments/tuning_ladder.py measures on
an H200.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algorithm"))
import transformer_math  # noqa: E402


# --8<-- [start:config]
@dataclass(frozen=True)
class Shape:
    d: int = 1024
    layers: int = 8
    heads: int = 16
    vocab: int = 32000
    seq: int = 1024
    batch: int = 8


GPU_SHAPE = Shape()
CPU_SHAPE = Shape(d=64, layers=2, heads=4, vocab=256, seq=32, batch=2)


@dataclass(frozen=True)
class Rung:
    name: str
    tf32: bool = False           # torch.set_float32_matmul_precision("high")
    autocast_bf16: bool = False  # torch.autocast(dtype=torch.bfloat16)
    sdpa: bool = False           # F.scaled_dot_product_attention instead of bmm + softmax + bmm
    fused_adamw: bool = False    # AdamW(fused=True): the whole update in one kernel, launched per group of tensors
    compile: bool = False        # torch.compile(model), default mode


LADDER = [  # cumulative: each rung keeps the switches of the rungs before it
    Rung("R0"),
    Rung("R1", tf32=True),
    Rung("R2", tf32=True, autocast_bf16=True),
    Rung("R3", tf32=True, autocast_bf16=True, sdpa=True),
    Rung("R4", tf32=True, autocast_bf16=True, sdpa=True, fused_adamw=True),
    Rung("R5", tf32=True, autocast_bf16=True, sdpa=True, fused_adamw=True, compile=True),
]
# --8<-- [end:config]


# --8<-- [start:attention]
def manual_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v: [b, h, s, d_h]. Materialises the s x s scores and probabilities of every head."""
    b, h, s, dh = q.shape
    q, k, v = (t.reshape(b * h, s, dh) for t in (q, k, v))
    scores = torch.bmm(q, k.transpose(1, 2)) * (1.0 / math.sqrt(dh))
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
    return torch.bmm(probs, v).view(b, h, s, dh)


def attention(q, k, v, sdpa: bool) -> torch.Tensor:
    if sdpa:  # flash / cuDNN / memory-efficient kernel: the s x s matrix never reaches HBM
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return manual_attention(q, k, v)
# --8<-- [end:attention]


# --8<-- [start:model]
class Block(torch.nn.Module):
    def __init__(self, s: Shape, sdpa: bool):
        super().__init__()
        self.heads, self.sdpa = s.heads, sdpa
        self.ln1, self.ln2 = torch.nn.LayerNorm(s.d), torch.nn.LayerNorm(s.d)
        self.qkv, self.proj = torch.nn.Linear(s.d, 3 * s.d), torch.nn.Linear(s.d, s.d)
        self.fc1, self.fc2 = torch.nn.Linear(s.d, 4 * s.d), torch.nn.Linear(4 * s.d, s.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [b, s, d]
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(attention(q, k, v, self.sdpa).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, s: Shape, sdpa: bool = False):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(s.vocab, s.d), torch.nn.Embedding(s.seq, s.d)
        self.blocks = torch.nn.ModuleList(Block(s, sdpa) for _ in range(s.layers))
        self.ln_f = torch.nn.LayerNorm(s.d)
        self.head = torch.nn.Linear(s.d, s.vocab, bias=False)
        for m in self.modules():  # GPT-2 style initialisation
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                torch.nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: [b, s] -> logits [b, s, V]
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def loss_fn(model, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(ids)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> fp32, fp64 stays fp64
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
# --8<-- [end:model]


def set_attention(model: GPT, sdpa: bool) -> GPT:
    for block in model.blocks:
        block.sdpa = sdpa
    return model


def initial_state(s: Shape, seed: int = 0) -> dict:
    """The weights every rung starts from (and the fp64 reference is made of), on the CPU."""
    torch.manual_seed(seed)
    return {k: v.clone() for k, v in GPT(s).float().state_dict().items()}  # fp32 whatever the default dtype


def markov_batches(s: Shape, n: int, seed: int = 0, noise: float = 0.1,
                   used: int = 1024) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n batches from a fixed random successor map over `used` tokens of the vocabulary (next = succ[prev],
    replaced by a uniform token with probability `noise`): data with structure, so that a loss curve
    says whether the model learns (first which tokens occur, then which follows which)."""
    used = min(used, s.vocab)
    g = torch.Generator().manual_seed(seed)
    succ = torch.randperm(used, generator=g)
    ids = torch.empty(n * s.batch, s.seq + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(used, (n * s.batch,), generator=g)
    flip = torch.rand(n * s.batch, s.seq + 1, generator=g) < noise
    rnd = torch.randint(used, (n * s.batch, s.seq + 1), generator=g)
    for t in range(1, s.seq + 1):
        ids[:, t] = torch.where(flip[:, t], rnd[:, t], succ[ids[:, t - 1]])
    ids = ids.view(n, s.batch, s.seq + 1)
    return [(b[:, :-1].contiguous(), b[:, 1:].contiguous()) for b in ids]


# --8<-- [start:rung]
def build(rung: Rung, state: dict, s: Shape, device: torch.device, lr: float = 6e-4):
    """Model, optimizer and one training step for this rung, starting from `state`."""
    torch.set_float32_matmul_precision("high" if rung.tf32 else "highest")
    model = GPT(s, sdpa=rung.sdpa).to(device, torch.float32)  # autocast leaves float64 alone
    model.load_state_dict(state)
    fused = True if rung.fused_adamw and device.type == "cuda" else None  # None: foreach on CUDA
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=fused)
    fwd = torch.compile(model) if rung.compile else model

    def loss_of(ids, targets):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=rung.autocast_bf16):
            return loss_fn(fwd, ids, targets)

    def step(ids, targets) -> torch.Tensor:
        loss = loss_of(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()  # no .item(): a host sync per step would hide launch overhead

    return model, loss_of, step
# --8<-- [end:rung]


# --8<-- [start:check]
def loss_and_grad(model: GPT, loss_of, ids, targets) -> tuple[float, torch.Tensor]:
    """First-step loss and the global gradient vector (all parameters, float64, on the CPU)."""
    loss = loss_of(ids, targets)
    loss.backward()
    g = torch.cat([p.grad.reshape(-1).double().cpu() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    return float(loss.detach().double()), g


def fp64_reference(state: dict, s: Shape, device, ids, targets) -> tuple[float, torch.Tensor]:
    """Same weights, same batch, float64 everywhere, hand-written attention."""
    model = GPT(s, sdpa=False).to(device)
    model.load_state_dict(state)
    model.double()
    return loss_and_grad(model, lambda i, t: loss_fn(model, i, t), ids.to(device), targets.to(device))


def rel_err(x, ref) -> float:
    x, ref = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(ref, dtype=torch.float64)
    return float(torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref))


UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "tf32": 2.0 ** -11, "bf16": 2.0 ** -8}


def matmul_format(rung: Rung) -> str:
    return "bf16" if rung.autocast_bf16 else "tf32" if rung.tf32 else "fp32"


def tolerance(rung: Rung, s: Shape, what: str) -> float:
    """Each matmul rounds its two inputs to the rung's format (2u) and accumulates in fp32 over at most
    K = batch*seq terms (the weight gradients: sqrt(K) u_fp32, errors as a random walk). The loss
    passes through n = 6 L + 1 matmuls (qkv, QK^T, PV, proj, fc1, fc2 per layer, and the head), the
    gradient through 3n (forward, and two products per matmul backward); independent errors add in
    quadrature (sqrt(n)); a safety factor of 4."""
    u, u32 = UNIT_ROUNDOFF[matmul_format(rung)], UNIT_ROUNDOFF["fp32"]
    per_matmul = 2 * u + math.sqrt(s.batch * s.seq) * u32
    n = (6 * s.layers + 1) * (1 if what == "loss" else 3)
    return 4 * math.sqrt(n) * per_matmul
# --8<-- [end:check]


# --8<-- [start:flops]
def train_flops(s: Shape) -> int:
    """FLOPs of one training step = 3 x forward (backward = 2 x forward). The forward comes from
    code/algorithm/transformer_math.py: 2 N_matmul per token plus 4 L T^2 d per sequence for QK^T and PV
    over the full T x T matrix (a causal kernel skips half, the count does not). That module's Cfg is
    a SwiGLU model, so the attention weights and head go through it (intermediate_size = 0) and the
    GELU MLP's 2 x 4 d^2 per layer is added here. In total: 6 N_matmul tokens + 12 L T^2 d b."""
    cfg = transformer_math.Cfg(s.vocab, s.d, s.layers, s.heads, s.heads, intermediate_size=0)
    mlp = 2 * (s.layers * 8 * s.d * s.d) * s.seq * s.batch
    return 3 * (transformer_math.forward_flops(cfg, s.seq, s.batch) + mlp)


def matmul_params(s: Shape) -> int:
    return s.layers * 12 * s.d * s.d + s.vocab * s.d
# --8<-- [end:flops]
