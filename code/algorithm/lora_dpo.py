"""Training-stage formulas (docs/algorithm/training-stages.md): scaling-law arithmetic,
LoRA, sequence log-probabilities with SFT loss masking, the DPO loss, GRPO advantages and
the memory a stage needs. Tested in tests/test_algorithm_training_stages.py.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:chinchilla]
def chinchilla_optimal(compute_flops, tokens_per_param=20.0):
    """Compute-optimal N and D under C = 6 N D with D = k N (Hoffmann et al. 2022: k ~ 20).
    N = sqrt(C / (6 k)), D = k N."""
    n = math.sqrt(compute_flops / (6 * tokens_per_param))
    return n, tokens_per_param * n


def chinchilla_loss(n_params, n_tokens, E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28):
    """Parametric fit L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022, eq. 10)."""
    return E + A / n_params ** alpha + B / n_tokens ** beta
# --8<-- [end:chinchilla]


# --8<-- [start:lora]
class LoRALinear(nn.Module):
    """y = W x + (alpha / r) B A x, W frozen, A: (r, d_in) random, B: (d_out, r) zero, so the
    adapted model starts exactly equal to the base model."""
    def __init__(self, base: nn.Linear, r=8, alpha=16):
        super().__init__()
        self.base, self.scale = base, alpha / r
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + self.scale * (x @ self.A.T) @ self.B.T

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """Fold the update into one Linear: W' = W + (alpha / r) B A (no extra inference cost)."""
        out = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        out.weight.copy_(self.base.weight + self.scale * self.B @ self.A)
        if self.base.bias is not None:
            out.bias.copy_(self.base.bias)
        return out


def add_lora(module: nn.Module, names=("wq", "wv"), r=8, alpha=16):
    """Freeze everything, then wrap every nn.Linear whose attribute name is in `names`."""
    for p in module.parameters():
        p.requires_grad_(False)
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if name in names and isinstance(child, nn.Linear):
                setattr(parent, name, LoRALinear(child, r, alpha))
    return module
# --8<-- [end:lora]


# --8<-- [start:logprob]
def sequence_logprob(logits, tokens, loss_mask):
    """Sum over response positions of log pi(token_t | tokens_<t).
    logits: (B, T, V) from feeding tokens[:, :-1]; tokens: (B, T); loss_mask: (B, T) with 1
    on response tokens. The prompt is masked out, exactly as in SFT."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    tok_logp = logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)          # (B, T-1)
    return (tok_logp * loss_mask[:, 1:]).sum(-1)


def sft_loss(logits, tokens, loss_mask):
    """Mean negative log-likelihood per response token."""
    return -sequence_logprob(logits, tokens, loss_mask).sum() / loss_mask[:, 1:].sum()
# --8<-- [end:logprob]


# --8<-- [start:dpo]
def dpo_loss(pi_chosen, pi_rejected, ref_chosen, ref_rejected, beta=0.1):
    """-log sigmoid(beta * [(log pi/ref)(y_w) - (log pi/ref)(y_l)]), from the closed-form optimum
    of max E[r] - beta KL(pi || ref). Returns the loss and the implicit reward margin."""
    margin = beta * ((pi_chosen - ref_chosen) - (pi_rejected - ref_rejected))
    return -F.logsigmoid(margin).mean(), margin.detach()
# --8<-- [end:dpo]


# --8<-- [start:grpo]
def grpo_advantages(rewards, eps=1e-6):
    """rewards: (n_prompts, G) for G sampled answers per prompt. Advantage of each answer is
    its reward standardised within its own group: no value network is needed."""
    mean = rewards.mean(-1, keepdim=True)
    std = rewards.std(-1, keepdim=True)
    return (rewards - mean) / (std + eps)
# --8<-- [end:grpo]


# --8<-- [start:memory]
def training_memory_gib(n_params, trainable, weight_bytes=2.0):
    """Weights + gradients + Adam states for mixed-precision training (activations excluded):
    frozen weights cost weight_bytes each; each trainable parameter costs 2 (bf16 weight)
    + 2 (bf16 grad) + 4 (fp32 master) + 4 + 4 (Adam m, v) = 16 bytes."""
    frozen = n_params - trainable
    return (frozen * weight_bytes + trainable * 16) / 2**30
# --8<-- [end:memory]
