"""A GPT layer written the way Korthikanti et al. (2022) count its activations: LayerNorm, fused QKV
projection, explicit softmax attention with dropout, GELU MLP of width 4h, dropout after each block.
Used to check the activation formula of memory_budget.py by counting what autograd saves (CPU, tests)
and by measuring `torch.cuda.memory_allocated` on a GPU (bench/experiments/train_step_memory.py)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


# --8<-- [start:layer]
class Layer(torch.nn.Module):
    def __init__(self, h: int, a: int, p: float = 0.1):  # p = 0: no dropout (and no masks kept)
        super().__init__()
        self.a, self.p = a, p
        self.ln1, self.ln2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
        self.qkv, self.proj = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
        self.fc1, self.fc2 = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:  # x: [s, b, h] as in Megatron
        s, b, h = x.shape
        d = h // self.a
        q, k, v = self.qkv(self.ln1(x)).view(s, b * self.a, 3 * d).transpose(0, 1).split(d, dim=-1)
        scores = torch.bmm(q, k.transpose(1, 2)) * (1.0 / math.sqrt(d))  # bmm keeps q and k; the scaling keeps nothing
        probs = F.dropout(scores.masked_fill(causal, float("-inf")).softmax(-1), self.p, self.training)
        ctx = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, h)
        x = x + F.dropout(self.proj(ctx), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)
# --8<-- [end:layer]


class GPT(torch.nn.Module):
    def __init__(self, layers: int, h: int, a: int, vocab: int, recompute: bool = False, p: float = 0.1):
        super().__init__()
        self.recompute = recompute
        self.embed = torch.nn.Embedding(vocab, h)
        self.layers = torch.nn.ModuleList(Layer(h, a, p) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: [s, b] -> logits [s, b, V]
        x = self.embed(ids)
        causal = causal_mask(ids.shape[0], ids.device)  # one mask shared by every layer
        for layer in self.layers:
            x = checkpoint(layer, x, causal, use_reentrant=False) if self.recompute and self.training else layer(x, causal)
        return self.head(self.ln_f(x))


def causal_mask(s: int, device) -> torch.Tensor:
    return torch.ones(s, s, dtype=torch.bool, device=device).triu(1)


def saved_bytes(fn, module: torch.nn.Module, shared=()) -> tuple[int, object]:
    """Bytes of distinct storages autograd saves for backward while fn() runs; the module's parameters
    (and their transposed views) and the tensors in `shared` are not activations and are left out."""
    seen: dict[tuple, int] = {}
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    params |= {t.untyped_storage().data_ptr() for t in shared}

    def pack(t: torch.Tensor):
        if t.untyped_storage().data_ptr() not in params:
            st = t.untyped_storage()
            seen[(st.data_ptr(), st.nbytes())] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(seen.values()), out


def layer_saved_bytes(s: int, b: int, h: int, a: int, dtype=torch.bfloat16, recompute: bool = False,
                      p: float = 0.0) -> int:
    """What autograd keeps for one layer's backward, counted on the CPU. The layer's input is counted (its
    first LayerNorm saves it), as in Korthikanti et al.'s per-layer accounting. On the CPU, dropout keeps a
    mask of the activation's dtype instead of CUDA's 1-byte mask, so the CPU check uses p = 0."""
    torch.manual_seed(0)
    layer = Layer(h, a, p).to(dtype)
    layer.train()
    x = torch.randn(s, b, h, dtype=dtype, requires_grad=True)
    causal = causal_mask(s, x.device)
    if recompute:
        n, out = saved_bytes(lambda: checkpoint(layer, x, causal, use_reentrant=False), layer, (causal,))
    else:
        n, out = saved_bytes(lambda: layer(x, causal), layer, (causal,))
    out.float().sum().backward()  # the saved tensors were enough for backward
    return n
