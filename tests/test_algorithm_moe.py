"""code/algorithm/moe.py against per-token loops and hand computations."""
from __future__ import annotations

import math

import torch

from algorithm_helpers import load_listing

moe = load_listing("algorithm_moe", "moe.py")


def test_moe_layer_equals_per_token_loop():
    torch.manual_seed(0)
    layer = moe.MoE(16, 32, n_experts=6, k=2, n_shared=1)
    x = torch.randn(40, 16)
    y = layer(x)
    probs = torch.softmax(layer.router(x), -1)
    for t in range(40):
        top = probs[t].topk(2)
        w = top.values / top.values.sum()                  # softmax over chosen logits == renormalised probs
        ref = layer.shared[0](x[t]) + sum(w[j] * layer.experts[int(top.indices[j])](x[t]) for j in range(2))
        torch.testing.assert_close(y[t], ref, atol=1e-5, rtol=1e-5)


def test_balancing_loss_values():
    E = 4
    uniform_probs = torch.full((8, E), 1 / E)
    idx = torch.arange(8).remainder(E)[:, None]
    assert math.isclose(moe.load_balancing_loss(uniform_probs, idx, E).item(), 1.0, rel_tol=1e-6)
    # everything on expert 0 with probability 1: loss = E
    collapsed = torch.zeros(8, E)
    collapsed[:, 0] = 1
    assert math.isclose(moe.load_balancing_loss(collapsed, torch.zeros(8, 1, dtype=torch.long), E).item(), E)
    z = moe.router_z_loss(torch.zeros(5, E))
    assert math.isclose(z.item(), math.log(E) ** 2, rel_tol=1e-6)


def test_capacity_dropping_matches_a_serial_count():
    torch.manual_seed(0)
    T, E, k = 64, 4, 2
    logits = torch.randn(T, E) + torch.tensor([1.5, 0.0, 0.0, -1.0])   # skewed router
    idx, _, _ = moe.top_k_route(logits, k)
    for factor in (0.5, 1.0, 1.25, 2.0):
        cap = moe.capacity(T, E, k, factor)
        keep = moe.dispatch_mask(idx, E, cap)
        used = [0] * E
        ref = torch.zeros(T, k, dtype=torch.bool)
        for j in range(k):
            for t in range(T):
                e = int(idx[t, j])
                if used[e] < cap:
                    used[e] += 1
                    ref[t, j] = True
        assert torch.equal(keep, ref)
    assert moe.capacity(64, 4, 2, 1.25) == 40


def test_bias_balances_load_without_changing_gates():
    torch.manual_seed(0)
    layer = moe.MoE(8, 8, n_experts=4, k=1)
    with torch.no_grad():
        layer.router.weight[0] += 2.0                       # expert 0 favoured
    x = torch.randn(512, 8)
    layer(x, use_bias=True)
    start = torch.bincount(layer.last["idx"].flatten(), minlength=4)
    for _ in range(300):
        layer(x, use_bias=True)
        layer.update_bias(gamma=0.01)
    end = torch.bincount(layer.last["idx"].flatten(), minlength=4)
    assert end.max() - end.min() < (start.max() - start.min()) / 3
    # the gate of a top-1 choice is 1 whatever the bias: the bias only decides who is chosen
    gates = moe.top_k_route(layer.router(x), 1, layer.bias)[1]
    assert torch.allclose(gates, torch.ones_like(gates))
