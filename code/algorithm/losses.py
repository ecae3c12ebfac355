"""Classification losses written from their formulas (docs/algorithm/losses.md).

tests/test_algorithm_losses.py checks each against PyTorch (F.cross_entropy, label smoothing,
BCE) and against the identities on the page (CE = H + KL, gradient p - y, reductions to BCE).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


# --8<-- [start:ce]
def cross_entropy(logits, target, label_smoothing=0.0):
    """Mean over the batch of -sum_c t_c log softmax(z)_c, with the smoothed target
    t = (1 - eps) * onehot + eps / C."""
    c = logits.shape[-1]
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)   # stable log-softmax
    t = F.one_hot(target, c).to(logits.dtype) * (1 - label_smoothing) + label_smoothing / c
    return -(t * logp).sum(dim=-1).mean()


def entropy_plus_kl(p, q):
    """Cross-entropy H(p, q) split as H(p) + KL(p || q) for distributions p, q (last axis)."""
    h = -(p * torch.log(p)).sum(-1)
    kl = (p * (torch.log(p) - torch.log(q))).sum(-1)
    return h, kl
# --8<-- [end:ce]


# --8<-- [start:focal]
def focal_loss(logits, target, gamma=2.0, alpha=0.25):
    """Binary (sigmoid) focal loss of Lin et al., summed over elements. target in {0, 1}.
    FL = -alpha_t (1 - p_t)^gamma log p_t; alpha=None means no alpha weighting."""
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")   # = -log p_t
    p_t = p * target + (1 - p) * (1 - target)
    loss = (1 - p_t) ** gamma * ce
    if alpha is not None:
        loss = (alpha * target + (1 - alpha) * (1 - target)) * loss
    return loss.sum()


def asymmetric_loss(logits, target, gamma_pos=0.0, gamma_neg=4.0, clip=0.05):
    """ASL (Ridnik et al.) for multi-label: positives -(1-p)^g+ log p; negatives use the
    shifted probability p_m = max(p - clip, 0) and -p_m^g- log(1 - p_m)."""
    p = torch.sigmoid(logits)
    p_m = (p - clip).clamp(min=0) if clip > 0 else p
    pos = target * (1 - p) ** gamma_pos * F.logsigmoid(logits)
    neg = (1 - target) * p_m ** gamma_neg * torch.log((1 - p_m).clamp(min=1e-12))
    return -(pos + neg).sum()
# --8<-- [end:focal]


# --8<-- [start:imbalance]
def class_balanced_weights(counts, beta=0.999):
    """Cui et al.: weight of class c is (1 - beta) / (1 - beta^{n_c}), rescaled to sum to C."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    w = (1 - beta) / (1 - beta ** counts)
    return w * len(counts) / w.sum()


def logit_adjusted_cross_entropy(logits, target, prior, tau=1.0):
    """Menon et al.: train on z + tau * log(prior); predict with plain z (argmax of z)."""
    return F.cross_entropy(logits + tau * torch.log(prior), target)
# --8<-- [end:imbalance]


# --8<-- [start:infonce]
def info_nce(q, k, temperature=0.1):
    """q, k: (N, D) embeddings of N positive pairs; the other N - 1 keys of the batch are the
    negatives for each query. Cosine similarity / temperature, then cross-entropy on the diagonal."""
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    logits = q @ k.T / temperature
    return F.cross_entropy(logits, torch.arange(q.shape[0]))


def info_nce_mi_lower_bound(loss, n):
    """van den Oord et al.: I(q; k) >= log N - L_InfoNCE (so the bound never exceeds log N)."""
    return math.log(n) - float(loss)
# --8<-- [end:infonce]
