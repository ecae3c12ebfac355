"""code/algorithm/multimodal.py: patch embedding vs conv2d, CLIP loss two ways, connector and token counts."""
from __future__ import annotations

import pytest
import torch
from algorithm_helpers import load_listing

M = load_listing("algorithm_multimodal", "multimodal.py")
D = torch.float64


@pytest.mark.parametrize("size,p", [(32, 4), (28, 14), (48, 16)])
def test_patch_embedding_is_a_strided_conv(size, p):
    g = torch.Generator().manual_seed(0)
    img = torch.randn(2, 3, size, size, generator=g, dtype=D)
    w = torch.randn(24, 3 * p * p, generator=g, dtype=D)
    b = torch.randn(24, generator=g, dtype=D)
    ours, conv = M.patch_embed(img, w, b, p), M.patch_embed_conv(img, w, b, p)
    assert ours.shape == (2, M.image_tokens(size, size, p), 24)
    assert torch.allclose(ours, conv, atol=1e-12)


def test_image_token_counts():
    assert M.image_tokens(224, 224, 16) == 196 and M.image_tokens(224, 224, 16, cls=True) == 197   # ViT-B/16
    assert M.image_tokens(224, 224, 14) == 256                       # LLaVA v1: CLIP ViT-L/14 at 224
    assert M.image_tokens(336, 336, 14) == 576                       # LLaVA-1.5: CLIP ViT-L/14 at 336
    # doubling the side quadruples the tokens (and attention over them costs 16x)
    assert M.image_tokens(672, 672, 14) == 4 * 576
    assert M.dit_tokens(256, p=2) == 256 and M.dit_tokens(256, p=8) == 16 and M.dit_tokens(512, p=2) == 1024


def test_clip_loss_two_ways_and_against_infonce():
    g = torch.Generator().manual_seed(0)
    img, txt = torch.randn(16, 32, generator=g, dtype=D), torch.randn(16, 32, generator=g, dtype=D)
    scale = 1 / 0.07                                                  # CLIP's initial temperature 0.07
    a, b = M.clip_loss(img, txt, scale), M.clip_loss_explicit(img, txt, scale)
    assert abs(a.item() - b.item()) < 1e-12
    losses = load_listing("algorithm_losses", "losses.py")            # one direction = InfoNCE on the same pairs
    half = (losses.info_nce(img, txt, 0.07) + losses.info_nce(txt, img, 0.07)) / 2
    assert abs(a.item() - half.item()) < 1e-12
    # perfectly aligned, well-separated pairs drive it to ~0; random pairs sit near log N
    eye = torch.eye(16, dtype=D)
    assert M.clip_loss(eye, eye, 100.0).item() < 1e-12
    assert abs(M.clip_loss(img, txt, 1.0).item() - torch.log(torch.tensor(16.0)).item()) < 0.2


def test_connector_params_shapes_and_kv_cost():
    for mlp, cls in ((False, M.LinearProjector), (True, M.MLPProjector)):
        proj = cls(1024, 4096)                                        # CLIP ViT-L width -> Vicuna-7B width
        assert sum(q.numel() for q in proj.parameters()) == M.projector_params(1024, 4096, mlp)
        feats = torch.randn(1, 576, 1024)
        tok = proj(feats)
        assert tok.shape == (1, 576, 4096)
    text = torch.randn(1, 20, 4096)
    seq = M.splice_image_tokens(text, tok, pos=5)
    assert seq.shape == (1, 20 - 1 + 576, 4096) and torch.equal(seq[:, 5:581], tok)
    # Vicuna-7B (LLaMA-7B shape): 32 layers, 32 KV heads of 128, fp16 -> 512 KiB per token, 288 MiB per image
    assert M.kv_cache_bytes(1, 32, 32, 128) == 512 * 1024
    assert M.kv_cache_bytes(576, 32, 32, 128) == 288 * 2 ** 20


def test_adaln_zero_block_starts_as_identity_and_has_18_d2_params():
    torch.manual_seed(0)
    d = 64
    blk = M.AdaLNZeroBlock(d, heads=4)
    x, c = torch.randn(2, 16, d), torch.randn(2, d)
    assert torch.equal(blk(x, c), x)                                  # gates are zero at init
    n = sum(q.numel() for q in blk.parameters())
    assert n == 18 * d * d + (3 * d + d) + (4 * d + d) + 6 * d        # 18 d^2 weights plus the biases
    with torch.no_grad():                                             # once the gate moves, the block acts
        blk.ada[1].bias.fill_(0.1)
    assert not torch.allclose(blk(x, c), x)


def test_dit_xl2_total_parameters_are_the_quoted_675m():
    # DiT-XL/2 (facebookresearch/DiT models.py): 28 blocks of width 1152 with 16 heads, patch 2 on a 32x32x4
    # latent, a learned sigma doubles the output channels, 1000 classes plus one null class for guidance,
    # a 256-dim sinusoidal timestep embedding through a 2-layer MLP, fixed (non-trainable) position embeddings
    d, depth, p, c_in = 1152, 28, 2, 4
    with torch.device("meta"):
        block = sum(q.numel() for q in M.AdaLNZeroBlock(d, heads=16).parameters())
    assert depth * 18 * d * d == 668_860_416                          # the 18 d^2 estimate on the page
    x_embed = p * p * c_in * d + d
    t_embed = (256 * d + d) + (d * d + d)
    y_embed = 1001 * d
    final = (d * 2 * d + 2 * d) + (d * p * p * 2 * c_in + p * p * 2 * c_in)
    total = depth * block + x_embed + t_embed + y_embed + final
    assert total == 674_834_720 and round(total / 1e6) == 675
