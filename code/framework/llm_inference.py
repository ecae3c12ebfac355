"""KV-cache sizes and a decode roofline for LLM serving (docs/framework/llm-inference.md)."""
from __future__ import annotations

from dataclasses import dataclass


# --8<-- [start:kv-bytes]
@dataclass(frozen=True)
class AttnConfig:
    """Just the fields of a model config that decide the size of its KV cache."""

    name: str
    layers: int
    q_heads: int
    kv_heads: int = 0  # MHA: = q_heads, GQA: fewer, MQA: 1; 0 for MLA
    head_dim: int = 0
    kv_lora_rank: int = 0  # MLA: width of the compressed latent c_KV
    rope_dim: int = 0  # MLA: width of the decoupled RoPE key k^R, shared by all heads

    @property
    def kind(self) -> str:
        if self.kv_lora_rank:
            return "MLA"
        if self.kv_heads == self.q_heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"


def kv_elems_per_token(cfg: AttnConfig) -> int:
    """Elements cached per token, summed over all layers."""
    if cfg.kind == "MLA":  # one latent plus one RoPE key per layer, not per head
        return cfg.layers * (cfg.kv_lora_rank + cfg.rope_dim)
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim  # K and V


def kv_bytes_per_token(cfg: AttnConfig, bytes_per_elem: float = 2) -> float:
    return kv_elems_per_token(cfg) * bytes_per_elem


def kv_bytes_per_request(cfg: AttnConfig, tokens: int, bytes_per_elem: float = 2) -> float:
    return tokens * kv_bytes_per_token(cfg, bytes_per_elem)
# --8<-- [end:kv-bytes]


# --8<-- [start:decode-roofline]
def decode_step(params: float, cfg: AttnConfig, batch: int, context: int,
                w_bytes: float = 2, kv_bytes: float = 2) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one decode step: every sequence adds one token.

    Weights are read once per step and shared by the whole batch; each sequence reads
    its own KV cache. FLOPs: 2 per weight per token, plus QK^T and PV over the context
    (2 * 2 * q_heads * head_dim per cached token per layer; for MLA we count the absorbed
    form, whose score and value dims are kv_lora_rank + rope_dim and kv_lora_rank).
    """
    if cfg.kind == "MLA":
        attn_per_ctx_token = 2 * cfg.layers * cfg.q_heads * (2 * cfg.kv_lora_rank + cfg.rope_dim)
    else:
        attn_per_ctx_token = 4 * cfg.layers * cfg.q_heads * cfg.head_dim
    flops = batch * (2 * params + attn_per_ctx_token * context)
    bytes_ = params * w_bytes + batch * context * kv_bytes_per_token(cfg, kv_bytes)
    return flops, bytes_


def decode_tokens_per_s(params: float, cfg: AttnConfig, batch: int, context: int,
                        peak_flops: float, hbm_bw: float, **kw) -> float:
    """Roofline bound on generated tokens/s of the whole batch: the step cannot be
    faster than its bytes over bandwidth nor its FLOPs over peak."""
    flops, bytes_ = decode_step(params, cfg, batch, context, **kw)
    step_s = max(flops / peak_flops, bytes_ / hbm_bw)
    return batch / step_s
# --8<-- [end:decode-roofline]


# Published configs (config.json of each model on the Hugging Face Hub; cited on the page).
LLAMA2_7B = AttnConfig("Llama-2-7B", layers=32, q_heads=32, kv_heads=32, head_dim=128)
LLAMA31_8B = AttnConfig("Llama-3.1-8B", layers=32, q_heads=32, kv_heads=8, head_dim=128)
LLAMA31_70B = AttnConfig("Llama-3.1-70B", layers=80, q_heads=64, kv_heads=8, head_dim=128)
QWEN25_7B = AttnConfig("Qwen2.5-7B", layers=28, q_heads=28, kv_heads=4, head_dim=128)
DEEPSEEK_V3 = AttnConfig("DeepSeek-V3", layers=61, q_heads=128, kv_lora_rank=512, rope_dim=64)

# H200 SXM from data/hardware/gpus.yml
H200_HBM_BW = 4.8e12  # B/s
H200_BF16_FLOPS = 989.5e12  # dense


# --8<-- [start:kv-transfer]
def kv_transfer_over_prefill(active_params: float, cfg: AttnConfig, net_bw: float,
                             peak_flops: float, kv_bytes: float = 2) -> float:
    """Time to ship a prompt's KV from a prefill to a decode instance, as a fraction of the
    (compute-bound) prefill time of the same prompt. Both scale with the prompt length, so the
    ratio does not depend on it; with TP each GPU sends its own shard over its own link, so the
    TP degree cancels too. Attention FLOPs are ignored, which makes this an upper bound."""
    transfer_per_token = kv_bytes_per_token(cfg, kv_bytes) / net_bw
    prefill_per_token = 2 * active_params / peak_flops
    return transfer_per_token / prefill_per_token
# --8<-- [end:kv-transfer]
