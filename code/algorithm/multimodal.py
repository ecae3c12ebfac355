"""Vision-language building blocks of docs/algorithm/multimodal.md, written out by hand.

tests/test_algorithm_multimodal.py checks the patch embedding against torch's conv2d, the CLIP loss
computed two ways, the LLaVA projector's parameter count, the image-token and KV-cache formulas, and that
an adaLN-Zero block is the identity at initialisation.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:patch]
def patchify(img, p):
    """(B, C, H, W) -> (B, N, C*p*p): cut the image into non-overlapping p x p patches, row-major,
    each flattened in (C, p, p) order (the order of a conv2d weight)."""
    B, C, H, W = img.shape
    assert H % p == 0 and W % p == 0, "ViT needs the image size to be a multiple of the patch size"
    x = img.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patch_embed(img, weight, bias, p):
    """ViT's patch embedding: one shared linear map of every flattened patch, weight (D, C*p*p)."""
    return patchify(img, p) @ weight.T + bias


def patch_embed_conv(img, weight, bias, p):
    """The same thing as a convolution with kernel = stride = patch size (how timm and HF write it)."""
    D = weight.shape[0]
    y = F.conv2d(img, weight.view(D, img.shape[1], p, p), bias, stride=p)   # (B, D, H/p, W/p)
    return y.flatten(2).transpose(1, 2)                                      # (B, N, D)


def image_tokens(h, w, p, cls=False):
    """Number of patch tokens (H/p)(W/p), plus one if the encoder prepends a [CLS] token."""
    return (h // p) * (w // p) + int(cls)
# --8<-- [end:patch]


# --8<-- [start:clip]
def clip_loss(img_emb, txt_emb, logit_scale):
    """CLIP: cosine similarities times a learned scale (1/temperature), then the symmetric InfoNCE:
    cross-entropy over texts for each image (rows) and over images for each text (columns), averaged."""
    i = F.normalize(img_emb, dim=-1)
    t = F.normalize(txt_emb, dim=-1)
    logits = logit_scale * i @ t.T                       # (N, N); the matching pairs are on the diagonal
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_explicit(img_emb, txt_emb, logit_scale):
    """The same loss written out: for pair k, -s_kk + log sum_j exp s_kj (image -> text) and
    -s_kk + log sum_j exp s_jk (text -> image)."""
    s = logit_scale * (img_emb / img_emb.norm(dim=-1, keepdim=True)) @ (txt_emb / txt_emb.norm(dim=-1, keepdim=True)).T
    diag = s.diagonal()
    i2t = (torch.logsumexp(s, dim=1) - diag).mean()
    t2i = (torch.logsumexp(s, dim=0) - diag).mean()
    return (i2t + t2i) / 2
# --8<-- [end:clip]


# --8<-- [start:connector]
class LinearProjector(nn.Module):
    """LLaVA (v1): one linear map from the vision feature width to the LLM's embedding width."""

    def __init__(self, d_vision, d_llm):
        super().__init__()
        self.proj = nn.Linear(d_vision, d_llm)

    def forward(self, feats):
        return self.proj(feats)


class MLPProjector(nn.Module):
    """LLaVA-1.5: a two-layer MLP with GELU (mlp2x_gelu) in place of the linear map."""

    def __init__(self, d_vision, d_llm):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_vision, d_llm), nn.GELU(), nn.Linear(d_llm, d_llm))

    def forward(self, feats):
        return self.net(feats)


def splice_image_tokens(text_emb, image_tok, pos):
    """Put the projected image tokens where the <image> placeholder was: the LLM then sees one sequence."""
    return torch.cat([text_emb[:, :pos], image_tok, text_emb[:, pos + 1:]], dim=1)


def projector_params(d_vision, d_llm, mlp):
    """Parameters (with biases) of the linear (v1) or the two-layer MLP (v1.5) connector."""
    first = d_vision * d_llm + d_llm
    return first + (d_llm * d_llm + d_llm if mlp else 0)


def kv_cache_bytes(tokens, layers, kv_heads, head_dim, bytes_per=2):
    """K and V for every layer: 2 * layers * kv_heads * head_dim * bytes per token."""
    return 2 * layers * kv_heads * head_dim * bytes_per * tokens
# --8<-- [end:connector]


# --8<-- [start:dit]
class AdaLNZeroBlock(nn.Module):
    """DiT block: the conditioning c (timestep + class embedding) regresses shift, scale and a gate
    alpha for both sub-layers; the regressor is zero-initialised, so alpha = 0 and the block starts as the
    identity. Parameters: attention 4d^2 + MLP 8d^2 + modulation 6d^2 ~ 18 d^2."""

    def __init__(self, d, heads, mlp_ratio=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, mlp_ratio * d), nn.GELU(approximate="tanh"), nn.Linear(mlp_ratio * d, d))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, x, c):
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(c).unsqueeze(1).chunk(6, dim=-1)
        h = self.norm1(x) * (1 + scale1) + shift1
        x = x + gate1 * self.attn(h, h, h, need_weights=False)[0]
        h = self.norm2(x) * (1 + scale2) + shift2
        return x + gate2 * self.mlp(h)


def dit_tokens(image_size, vae_down=8, p=2):
    """DiT patchifies the VAE latent (image_size / 8 on a side): T = (image_size / 8 / p)^2 tokens."""
    side = image_size // vae_down
    return (side // p) ** 2
# --8<-- [end:dit]
