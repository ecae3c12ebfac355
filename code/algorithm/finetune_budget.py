"""Arithmetic for a first fine-tune (docs/algorithm/hands-on-finetuning.md): LoRA parameter counts
for a decoder-only LLM and for the Stable Diffusion 1.5 UNet, and the memory of full fine-tuning,
LoRA and QLoRA. Tested in tests/test_algorithm_finetuning.py (the LLM shapes against a
transformers model built on the meta device, so no weights are needed).
"""
from __future__ import annotations

# --8<-- [start:llm]
QWEN25_05B = dict(hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2, vocab=151936)
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def decoder_linear_shapes(hidden, intermediate, heads, kv_heads, **_):
    """(in_features, out_features) of each Linear in one LLaMA/Qwen-style layer (GQA + SwiGLU)."""
    head_dim = hidden // heads
    kv = kv_heads * head_dim
    return {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv),
            "o_proj": (hidden, hidden), "gate_proj": (hidden, intermediate),
            "up_proj": (hidden, intermediate), "down_proj": (intermediate, hidden)}


def lora_params(shapes, r):
    """A is r x d_in and B is d_out x r: r (d_in + d_out) trainable numbers per adapted Linear."""
    return sum(r * (d_in + d_out) for d_in, d_out in shapes)


def llm_lora_params(cfg, r, targets=ATTN + MLP):
    per_layer = decoder_linear_shapes(**cfg)
    return cfg["layers"] * lora_params([per_layer[name] for name in targets], r)
# --8<-- [end:llm]


# --8<-- [start:unet]
SD15_UNET = dict(block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, cross_attention_dim=768,
                 down=("CrossAttn", "CrossAttn", "CrossAttn", "Plain"), up=("Plain", "CrossAttn", "CrossAttn", "CrossAttn"))


def unet_attention_shapes(block_out_channels, layers_per_block, cross_attention_dim, down, up):
    """Shapes of to_q, to_k, to_v, to_out.0 in every transformer block of a UNet2DConditionModel.
    Each block has self-attention (all C -> C) and cross-attention whose K and V read the text
    encoder's states (cross_attention_dim -> C). Down blocks hold layers_per_block transformer
    blocks, up blocks one more, the middle block one."""
    def block(c):
        self_attn = [(c, c)] * 4
        cross = [(c, c), (cross_attention_dim, c), (cross_attention_dim, c), (c, c)]
        return self_attn + cross

    shapes = []
    for kind, c in zip(down, block_out_channels):
        if kind == "CrossAttn":
            shapes += block(c) * layers_per_block
    shapes += block(block_out_channels[-1])                       # mid block
    for kind, c in zip(up, reversed(block_out_channels)):
        if kind == "CrossAttn":
            shapes += block(c) * (layers_per_block + 1)
    return shapes
# --8<-- [end:unet]


# --8<-- [start:memory]
def finetune_memory_gib(n_params, trainable, base_bytes=2.0, quantized=None):
    """Weights, gradients and AdamW states (activations excluded). Frozen weights cost 2 bytes each
    (bf16), except `quantized` of them, which cost base_bytes (about 0.5 + quantization constants for
    4-bit NF4; None: every frozen weight). QLoRA through bitsandbytes quantizes only the nn.Linear
    layers of the blocks: embeddings, the output layer, norms and biases stay bf16. Each trainable
    parameter costs 2 (bf16 weight) + 2 (grad) + 4 (fp32 master copy) + 4 + 4 (Adam m and v) = 16 bytes."""
    frozen = n_params - trainable
    low = frozen if quantized is None else quantized
    return ((frozen - low) * 2.0 + low * base_bytes + trainable * 16) / 2**30


def nf4_bytes_per_param(block=64, block2=256):
    """QLoRA storage: 4 bits per weight, one 8-bit constant per block of 64 weights, and one fp32
    constant per 256 of those (double quantization): 4 + 8/64 + 32/(64*256) bits."""
    return (4 + 8 / block + 32 / (block * block2)) / 8
# --8<-- [end:memory]
