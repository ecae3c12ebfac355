"""Cost formulas of a decoder-only Transformer (docs/algorithm/transformer.md).

Parameter count (and that of the BERT encoder, docs/algorithm/classic-networks.md), forward
FLOPs per sequence, training FLOPs (6ND) and KV-cache bytes per token for MHA / GQA / MQA / MLA. Tested in tests/test_algorithm_transformer.py against
Hugging Face models instantiated on the meta device from the published configs, against
torch.utils.flop_counter on the from-scratch model of code/algorithm/tiny_transformer.py,
and against the bytes of that model's real KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass


# --8<-- [start:configs]
@dataclass(frozen=True)
class Cfg:
    """Fields named after the Hugging Face config.json keys they come from."""
    vocab_size: int
    hidden_size: int                 # d
    num_hidden_layers: int           # n_layer
    num_attention_heads: int         # n_h
    num_key_value_heads: int         # n_kv (= n_h: MHA, 1: MQA, in between: GQA)
    intermediate_size: int           # d_ff of the SwiGLU FFN
    head_dim: int | None = None      # defaults to d / n_h
    tie_word_embeddings: bool = False
    qkv_bias: bool = False           # Qwen2 puts a bias on q, k, v
    kv_lora_rank: int | None = None  # MLA (DeepSeek-V2/V3): compressed KV width d_c
    qk_rope_head_dim: int | None = None  # MLA: decoupled RoPE key width d_h^R

    @property
    def d_head(self):
        return self.head_dim or self.hidden_size // self.num_attention_heads


PUBLISHED = {   # config.json of each model on the Hugging Face Hub (links on the page)
    "Llama-2-70B": Cfg(32000, 8192, 80, 64, 8, 28672),
    "Llama-3-8B": Cfg(128256, 4096, 32, 32, 8, 14336),
    "Qwen2.5-7B": Cfg(152064, 3584, 28, 28, 4, 18944, qkv_bias=True),
    "DeepSeek-V2": Cfg(102400, 5120, 60, 128, 128, 12288, kv_lora_rank=512, qk_rope_head_dim=64),
    "DeepSeek-V3": Cfg(129280, 7168, 61, 128, 128, 18432, kv_lora_rank=512, qk_rope_head_dim=64),
}
# --8<-- [end:configs]


# --8<-- [start:params]
def param_count(c: Cfg) -> int:
    """Dense Llama-style decoder: GQA attention, SwiGLU FFN, RMSNorm (weight only)."""
    d, dh = c.hidden_size, c.d_head
    q_out, kv_out = c.num_attention_heads * dh, c.num_key_value_heads * dh
    attn = d * q_out + 2 * d * kv_out + q_out * d            # W_q, W_k, W_v, W_o
    if c.qkv_bias:
        attn += q_out + 2 * kv_out
    ffn = 3 * d * c.intermediate_size                        # W_gate, W_up, W_down
    norms = 2 * d                                            # two RMSNorm gains per block
    embed = c.vocab_size * d * (1 if c.tie_word_embeddings else 2)   # input table + LM head
    return c.num_hidden_layers * (attn + ffn + norms) + embed + d     # + final norm
# --8<-- [end:params]


# --8<-- [start:bert]
def bert_param_count(vocab_size: int = 30522, hidden_size: int = 768, num_hidden_layers: int = 12,
                     intermediate_size: int = 3072, max_position_embeddings: int = 512,
                     type_vocab_size: int = 2, pooler: bool = True) -> int:
    """BERT encoder (Devlin et al. 2019; defaults = BERT-base, the Hugging Face BertConfig keys).
    Token, learned-position and segment embeddings summed, then a LayerNorm; Post-LN blocks in
    which every linear layer has a bias; the tanh pooler over [CLS]. The head count does not
    enter: n_h heads of d/n_h columns are the same d x d matrices."""
    d, f = hidden_size, intermediate_size
    embed = (vocab_size + max_position_embeddings + type_vocab_size) * d + 2 * d
    attn = 4 * (d * d + d)                      # W_Q, W_K, W_V, W_O with biases
    ffn = d * f + f + f * d + d                 # up and down projections with biases, GELU between
    norms = 2 * 2 * d                           # two LayerNorms (gain and bias)
    pool = d * d + d if pooler else 0
    return embed + num_hidden_layers * (attn + ffn + norms) + pool
# --8<-- [end:bert]


# --8<-- [start:flops]
def matmul_params(c: Cfg) -> int:
    """Weights that take part in a matrix multiply per token: everything but the embedding
    lookup, the norm gains and the biases (the LM head multiplies, so it counts)."""
    d, dh = c.hidden_size, c.d_head
    q_out, kv_out = c.num_attention_heads * dh, c.num_key_value_heads * dh
    per_layer = 2 * d * q_out + 2 * d * kv_out + 3 * d * c.intermediate_size
    return c.num_hidden_layers * per_layer + c.vocab_size * d


def forward_flops(c: Cfg, seq_len: int, batch: int = 1) -> int:
    """FLOPs (1 multiply-add = 2) of one forward pass over `batch` sequences of `seq_len`
    tokens, computing the full T x T score matrix as a dense kernel does:
    2 N per token for the weights, plus Q K^T and P V: 2 * 2 * T * n_h * d_h per token per layer."""
    T = seq_len
    weights = 2 * matmul_params(c) * T
    attention = 4 * c.num_hidden_layers * T * T * c.num_attention_heads * c.d_head
    return batch * (weights + attention)


def train_flops(n_params: float, n_tokens: float) -> float:
    """Forward 2N + backward 4N per token (Kaplan et al. 2020): C = 6 N D."""
    return 6 * n_params * n_tokens
# --8<-- [end:flops]


# --8<-- [start:kv]
def kv_bytes_per_token(c: Cfg, bytes_per_elem: int = 2) -> int:
    """Bytes of KV cache one token adds, all layers together.
    MHA/GQA/MQA: K and V, n_kv heads of d_h each.  MLA: one latent c_KV (d_c) plus the
    shared RoPE key k^R (d_h^R), since W_UK and W_UV are absorbed into W_Q and W_O."""
    if c.kv_lora_rank is not None:
        per_layer = c.kv_lora_rank + c.qk_rope_head_dim
    else:
        per_layer = 2 * c.num_key_value_heads * c.d_head
    return c.num_hidden_layers * per_layer * bytes_per_elem


def kv_cache_gib(c: Cfg, tokens: int, bytes_per_elem: int = 2) -> float:
    return kv_bytes_per_token(c, bytes_per_elem) * tokens / 2**30
# --8<-- [end:kv]


# --8<-- [start:scaling]
def init_variance_of_scores(d_k: int, scaled: bool) -> float:
    """q, k with i.i.d. zero-mean unit-variance entries: Var(q.k) = d_k; dividing by
    sqrt(d_k) brings it back to 1 whatever the head width."""
    return 1.0 if scaled else float(d_k)
# --8<-- [end:scaling]
