"""What each design choice of a Llama-style decoder costs (docs/interview/model-structure.md).

Built on the formulas of code/algorithm/transformer_math.py (parameters, matmul weights, KV bytes):
the parameters of every part of one block, and for each choice the alternative an interviewer asks
about with its cost in parameters, matmul FLOPs per token and KV-cache bytes per token.
Checked in tests/test_interview_model_structure.py, which also builds the from-scratch model of
code/algorithm/tiny_transformer.py and counts its parameters part by part.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algorithm"))
import transformer_math as tm  # noqa: E402


# --8<-- [start:breakdown]
def block_parts(c: tm.Cfg) -> dict[str, int]:
    """Parameters of one decoder block, part by part (no biases: Llama)."""
    d, dh = c.hidden_size, c.d_head
    q_out, kv_out = c.num_attention_heads * dh, c.num_key_value_heads * dh
    return {
        "W_q": d * q_out, "W_k": d * kv_out, "W_v": d * kv_out, "W_o": q_out * d,
        "W_gate": d * c.intermediate_size, "W_up": d * c.intermediate_size,
        "W_down": c.intermediate_size * d,
        "norms": 2 * d,                      # two RMSNorm gains
    }


def model_parts(c: tm.Cfg) -> dict[str, int]:
    """The whole model: the blocks, the embedding table, the LM head and the final norm."""
    embed = c.vocab_size * c.hidden_size
    return {"blocks": c.num_hidden_layers * sum(block_parts(c).values()),
            "embedding": embed, "lm_head": 0 if c.tie_word_embeddings else embed,
            "final_norm": c.hidden_size}


def cost(c: tm.Cfg) -> dict[str, int]:
    """Three numbers an interviewer asks for: parameters, matmul FLOPs per token
    (2 per weight that multiplies; attention scores not included) and bf16 KV bytes per token."""
    return {"params": tm.param_count(c), "matmul_flops_per_token": 2 * tm.matmul_params(c),
            "kv_bytes_per_token": tm.kv_bytes_per_token(c)}


def alternatives(c: tm.Cfg, max_positions: int = 8192) -> dict[str, dict[str, int]]:
    """Each alternative's cost minus the published config's (positive: the alternative costs more)."""
    base = cost(c)

    def delta(other: tm.Cfg) -> dict[str, int]:
        return {k: v - base[k] for k, v in cost(other).items()}

    d, layers = c.hidden_size, c.num_hidden_layers
    gelu_4d = 2 * d * (4 * d) - 3 * d * c.intermediate_size     # two d x 4d matrices instead of SwiGLU's three
    return {
        "MHA (n_kv = n_h)": delta(replace(c, num_key_value_heads=c.num_attention_heads)),
        "MQA (n_kv = 1)": delta(replace(c, num_key_value_heads=1)),
        "GELU FFN, d_ff = 4d": {"params": layers * gelu_4d, "matmul_flops_per_token": 2 * layers * gelu_4d,
                                "kv_bytes_per_token": 0},
        "LayerNorm (gain and bias)": {"params": (2 * layers + 1) * d, "matmul_flops_per_token": 0,
                                      "kv_bytes_per_token": 0},
        "learned absolute positions": {"params": max_positions * d, "matmul_flops_per_token": 0,
                                       "kv_bytes_per_token": 0},
        "tied embedding and LM head": delta(replace(c, tie_word_embeddings=True)),
    }
# --8<-- [end:breakdown]
