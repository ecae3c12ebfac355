"""Memory budget of one training step of a GPT-style model: model states, activations (Korthikanti et al.
2022), the logits buffer, with full/selective recomputation and tensor/sequence parallelism.
Checked by tests/test_framework_parallel.py; used by docs/framework/memory-precision.md."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPT:
    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn: int | None = None  # default 4h

    @property
    def params(self) -> int:
        f = self.ffn or 4 * self.hidden
        per_layer = 4 * self.hidden * self.hidden + 2 * self.hidden * f + 4 * self.hidden  # attn + MLP + 2 LN
        return self.layers * per_layer + self.vocab * self.hidden


# --8<-- [start:activations]
def activation_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                               recompute: str = "none") -> float:
    """Korthikanti et al. (16-bit activations, 1-byte dropout masks), bytes kept for backward per layer.
    attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh -> sbh(34 + 5as/h).
    TP splits everything except 10sbh (LayerNorm/dropout inputs); SP splits those too.
    'selective' recomputes the attention core (drops the 5as^2b term); 'full' keeps only the layer input."""
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    quad = 0.0 if recompute == "selective" else 5 * a * s * s * b / t
    if sp:
        return 34 * s * b * h / t + quad
    return s * b * h * (10 + 24 / t) + quad
# --8<-- [end:activations]


# --8<-- [start:general]
def layer_activation_bytes(s: int, b: int, h: int, a: int, value_bytes: int = 2, dropout: bool = True) -> float:
    """The same per-layer count for any activation width and with or without dropout (no TP, no recompute).
    Values: QKV input, Q, K, V, projection input (10sbh at 2 bytes), MLP inputs 2 + 8 + 8, LayerNorm inputs 4:
    16 * value_bytes * sbh; the softmax output, plus the dropout output when there is dropout: as^2b values.
    Masks (1 byte each): two of sbh (after attention and MLP) and one of as^2b (attention dropout)."""
    linear = s * b * h * (16 * value_bytes + (2 if dropout else 0))
    quad = a * s * s * b * (value_bytes * (2 if dropout else 1) + (1 if dropout else 0))
    return linear + quad
# --8<-- [end:general]


def step_memory(m: GPT, s: int, b: int, n_shard: int = 1, stage: int = 0, t: int = 1, sp: bool = False,
                recompute: str = "none") -> dict:
    """Bytes per GPU: model states (mixed-precision Adam, ZeRO stage over n_shard ranks, TP splits params by t),
    activations of all layers, and the fp32 logits plus their gradient."""
    psi = m.params / t
    states = {
        "params": 2 * psi / (n_shard if stage >= 3 else 1),
        "grads": 2 * psi / (n_shard if stage >= 2 else 1),
        "optim": 12 * psi / (n_shard if stage >= 1 else 1),
    }
    states["activations"] = m.layers * activation_bytes_per_layer(s, b, m.hidden, m.heads, t, sp, recompute)
    states["logits"] = 2 * s * b * m.vocab / t * 4  # fp32 logits and their gradient, vocab-parallel
    return states


def fp16_ranges() -> dict:
    """Largest finite value, smallest normal, smallest subnormal of the training formats."""
    return {"fp16": (65504.0, 2.0**-14, 2.0**-24), "bf16": (3.3895313892515355e38, 2.0**-126, 2.0**-133),
            "fp8_e4m3": (448.0, 2.0**-6, 2.0**-9), "fp8_e5m2": (57344.0, 2.0**-14, 2.0**-16)}
