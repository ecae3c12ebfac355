"""code/algorithm/lora_dpo.py against closed forms, hand computations and autograd."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from algorithm_helpers import load_listing


ld = load_listing("algorithm_lora_dpo", "lora_dpo.py")
tt = load_listing("algorithm_tiny_transformer_ts", "tiny_transformer.py")


def test_chinchilla_worked_numbers():
    n, d = ld.chinchilla_optimal(5.88e23)
    assert math.isclose(n, 70e9, rel_tol=1e-9) and math.isclose(d, 1.4e12, rel_tol=1e-9)
    # Gopher (280B params, 300B tokens) vs Chinchilla (70B, 1.4T): similar compute, lower fitted loss
    assert math.isclose(6 * 280e9 * 300e9, 5.04e23)
    assert ld.chinchilla_loss(70e9, 1.4e12) < ld.chinchilla_loss(280e9, 300e9)
    assert round(ld.chinchilla_loss(70e9, 1.4e12), 3) == 1.937
    assert round(ld.chinchilla_loss(280e9, 300e9), 3) == 1.993
    # Llama-3-8B: 15T tokens is ~1870 tokens per parameter, ~93x the Chinchilla ratio
    assert round(15e12 / 8.03e9) == 1868


def test_lora_params_merge_and_zero_init():
    torch.manual_seed(0)
    base = torch.nn.Linear(64, 48)
    lora = ld.LoRALinear(base, r=4, alpha=8)
    x = torch.randn(5, 64)
    torch.testing.assert_close(lora(x), base(x))             # B = 0: identical at start
    with torch.no_grad():
        lora.B.normal_()
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert trainable == 4 * (64 + 48)
    torch.testing.assert_close(lora.merged()(x), lora(x), atol=1e-5, rtol=1e-5)
    model = ld.add_lora(tt.TinyLM(20, d=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64), r=2)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert n_train == 2 * (2 * (32 + 32) + 2 * (32 + 16))     # per layer: wq (32->32), wv (32->16)


def test_sequence_logprob_masks_prompt():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    tokens = torch.randint(0, 7, (2, 6))
    mask = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    ref = torch.zeros(2)
    for b in range(2):
        for t in range(1, 6):
            if mask[b, t]:
                ref[b] += torch.log_softmax(logits[b, t - 1], -1)[tokens[b, t]]
    torch.testing.assert_close(ld.sequence_logprob(logits, tokens, mask), ref)
    full = F.cross_entropy(logits.reshape(-1, 7), tokens[:, 1:].reshape(-1), reduction="none").view(2, 5)
    torch.testing.assert_close(ld.sft_loss(logits, tokens, mask), (full * mask[:, 1:]).sum() / mask[:, 1:].sum())


def test_dpo_loss_and_gradient():
    pc, pr = torch.tensor([-3.0, -5.0], requires_grad=True), torch.tensor([-4.0, -2.0], requires_grad=True)
    rc, rr = torch.tensor([-3.5, -4.0]), torch.tensor([-3.5, -4.0])
    loss, margin = ld.dpo_loss(pc, pr, rc, rr, beta=0.5)
    expect_margin = 0.5 * torch.tensor([(-3 + 3.5) - (-4 + 3.5), (-5 + 4) - (-2 + 4)])
    torch.testing.assert_close(margin, expect_margin)
    torch.testing.assert_close(loss, -torch.log(torch.sigmoid(expect_margin)).mean())
    loss.backward()
    # d loss / d log pi(y_w) = -beta * sigmoid(-margin) / batch: pushes chosen up, rejected down
    torch.testing.assert_close(pc.grad, -0.5 * torch.sigmoid(-expect_margin) / 2)
    torch.testing.assert_close(pr.grad, 0.5 * torch.sigmoid(-expect_margin) / 2)
    # at the reference policy the loss is log 2
    l0, _ = ld.dpo_loss(rc, rr, rc, rr)
    assert math.isclose(l0.item(), math.log(2), rel_tol=1e-6)


def test_dpo_optimum_is_the_kl_regularised_policy():
    # pi*(y) = ref(y) exp(r(y)/beta) / Z maximises E_pi[r] - beta KL(pi || ref) over a finite set
    torch.manual_seed(0)
    ref = torch.softmax(torch.randn(6), 0)
    r, beta = torch.randn(6), 0.7
    star = ref * torch.exp(r / beta)
    star = star / star.sum()

    def objective(p):
        return (p * r).sum() - beta * (p * (p / ref).log()).sum()

    for _ in range(200):
        other = torch.softmax(torch.log(star) + 0.3 * torch.randn(6), 0)
        assert objective(other) <= objective(star) + 1e-6
    # the reward is recovered up to a constant from the log-ratio: r = beta log(pi*/ref) + beta log Z
    diff = r - beta * (star / ref).log()
    assert torch.allclose(diff, diff[0].expand(6), atol=1e-5)


def test_grpo_advantages():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    a = ld.grpo_advantages(r)
    torch.testing.assert_close(a.mean(-1), torch.zeros(2), atol=1e-6, rtol=0)
    torch.testing.assert_close(a.std(-1), torch.ones(2), atol=1e-5, rtol=0)
    assert a[1, 3] > 0 > a[1, 0]


def test_memory_worked_numbers():
    assert round(ld.training_memory_gib(7e9, 7e9)) == 104            # full fine-tune, 7B: 112 GB
    assert round(ld.training_memory_gib(70e9, 70e9)) == 1043          # 70B: 1.12 TB
    # Llama-2-70B, LoRA r = 16 on W_q (8192 -> 8192) and W_v (8192 -> 1024) of all 80 layers
    lora_params = 80 * 16 * ((8192 + 8192) + (8192 + 1024))
    assert lora_params == 32_768_000 and round(lora_params / 70e9 * 100, 3) == 0.047
    assert round(ld.training_memory_gib(70e9, lora_params), 1) == 130.8       # bf16 frozen base
    assert round(ld.training_memory_gib(70e9, lora_params, weight_bytes=0.5), 1) == 33.1   # 4-bit base
