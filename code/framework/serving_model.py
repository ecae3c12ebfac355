"""A Llama-style decoder with a static KV cache, small enough to read, used to measure real prefill and
decode step times (bench/experiments/serving_step_times.py) and checked on the CPU by
tests/test_framework_serving_model.py (decoding with the cache equals recomputing the whole sequence).

Weights are random: step time depends on shapes, not on values. Decode steps are meant to be captured
in a CUDA Graph, as serving engines do, so the cache is preallocated and every decode step reads a
fixed slice of it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 128256
    hidden: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    ffn: int = 8192
    rope_theta: float = 500000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h
        mlp = 3 * h * self.ffn
        return self.layers * (attn + mlp + 2 * h) + 2 * self.vocab * h + h  # untied embedding and head

    def kv_bytes_per_token(self, bytes_per_elem: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_elem


# Llama-3.2-1B's published shape (hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256),
# with an untied output head.
LLAMA_1B = LlamaConfig()


def _rope_tables(pos: torch.Tensor, d: int, theta: float, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles pos * theta^(-2i/d), [T, D/2]; made once per step, shared by all layers."""
    inv = theta ** (-torch.arange(0, d, 2, device=pos.device, dtype=torch.float32) / d)
    ang = pos.to(torch.float32)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., :d/2], x[..., d/2:]) by the tabulated angles; x is [B, H, T, D]."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * w


class Decoder(torch.nn.Module):
    def __init__(self, cfg: LlamaConfig, batch: int = 1, max_len: int = 0, dtype=torch.bfloat16, device="cpu",
                 seed: int = 0):
        super().__init__()
        self.cfg = cfg
        g = torch.Generator(device=device).manual_seed(seed)

        def w(*shape, scale=None):
            scale = 1 / math.sqrt(shape[0]) if scale is None else scale
            t = torch.randn(*shape, generator=g, device=device, dtype=torch.float32).mul_(scale).to(dtype)
            return torch.nn.Parameter(t, requires_grad=False)

        h, d, f = cfg.hidden, cfg.head_dim, cfg.ffn
        self.embed = w(cfg.vocab, h, scale=1.0)
        self.wqkv = torch.nn.ParameterList([w(h, (cfg.heads + 2 * cfg.kv_heads) * d) for _ in range(cfg.layers)])
        self.wo = torch.nn.ParameterList([w(cfg.heads * d, h) for _ in range(cfg.layers)])
        self.w_up = torch.nn.ParameterList([w(h, 2 * f) for _ in range(cfg.layers)])
        self.w_down = torch.nn.ParameterList([w(f, h) for _ in range(cfg.layers)])
        ones = lambda: torch.nn.Parameter(torch.ones(h, device=device, dtype=dtype), requires_grad=False)  # noqa: E731
        self.norm1 = torch.nn.ParameterList([ones() for _ in range(cfg.layers)])
        self.norm2 = torch.nn.ParameterList([ones() for _ in range(cfg.layers)])
        self.norm_f = ones()
        self.head = w(h, cfg.vocab)
        self.allocate_cache(batch, max_len)

    def allocate_cache(self, batch: int, max_len: int) -> None:
        """A fresh KV cache for `batch` sequences of up to `max_len` tokens (the weights stay)."""
        self.k_cache = self.v_cache = None
        cfg, p = self.cfg, self.norm_f
        shape = (cfg.layers, batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.k_cache = torch.zeros(shape, device=p.device, dtype=p.dtype)
        self.v_cache = torch.zeros(shape, device=p.device, dtype=p.dtype)

    # --8<-- [start:layers]
    def _layers(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x: [B, T, H] hidden states of positions start..start+T-1; fills the cache and attends causally."""
        cfg, (b, t, _) = self.cfg, x.shape
        d = cfg.head_dim
        cos, sin = _rope_tables(torch.arange(start, start + t, device=x.device), d, cfg.rope_theta, x.dtype)
        for i in range(cfg.layers):
            qkv = _rms(x, self.norm1[i]) @ self.wqkv[i]
            q, k, v = qkv.split([cfg.heads * d, cfg.kv_heads * d, cfg.kv_heads * d], dim=-1)
            q = _rope(q.view(b, t, cfg.heads, d).transpose(1, 2), cos, sin)
            k = _rope(k.view(b, t, cfg.kv_heads, d).transpose(1, 2), cos, sin)
            self.k_cache[i, :b, :, start:start + t] = k
            self.v_cache[i, :b, :, start:start + t] = v.view(b, t, cfg.kv_heads, d).transpose(1, 2)
            keys, values = self.k_cache[i, :b, :, : start + t], self.v_cache[i, :b, :, : start + t]
            if t == 1:  # decode: one query attends to every cached position
                o = F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
            elif start == 0:  # prefill from an empty cache: plain causal attention
                o = F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)
            else:  # a chunk after a cached prefix: query j sees positions <= start + j
                mask = torch.ones(t, start + t, dtype=torch.bool, device=x.device).tril(start)
                o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(b, t, cfg.heads * d) @ self.wo[i]
            gate, up = (_rms(x, self.norm2[i]) @ self.w_up[i]).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ self.w_down[i]
        return _rms(x, self.norm_f)
    # --8<-- [end:layers]

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """tokens [B, T] at positions start..start+T-1 -> logits of the last position [B, V]."""
        return self._layers(self.embed[tokens], start)[:, -1] @ self.head

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """One decode step: tokens [B] at position pos (the cache holds 0..pos-1) -> logits [B, V]."""
        return self._layers(self.embed[tokens][:, None], pos)[:, 0] @ self.head
