"""code/framework/spec_engine.py (docs/framework/engine-spec-decode.md): greedy speculative decoding in a
budgeted batching engine gives exactly plain greedy decoding, even though rejected drafts' KV slots are
written and then overwritten; the tokens per verification follow spec_decode.expected_tokens_per_step; the
drafts share the token budget with prefill; the speed-up shrinks with batch size on the H200 roofline.
EAGLE tree drafting: verifying a tree in one pass with the ancestor mask equals verifying every root-to-leaf
path on its own (random-weight attention, float64), and the accepted tokens equal greedy decoding."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import spec_decode as sd  # noqa: E402
import spec_engine as se  # noqa: E402

H200 = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]["nvidia-h200"]
V = 16
PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [3] * 9, [2, 5, 1]]


def target(ctx):  # a deterministic "model": greedy next token of a context
    return (ctx[-1] * 7 + len(ctx) * 3 + (ctx[-2] if len(ctx) > 1 else 0)) % V


def drafter(alpha, seed=0):
    rng = np.random.default_rng(seed)

    def draft(ctx):  # right with probability alpha, independently at every position
        t = target(ctx)
        return t if rng.random() < alpha else (t + 1) % V
    return draft


def greedy(prompt, n):
    out = list(prompt)
    for _ in range(n):
        out.append(target(out))
    return out[len(prompt):]


def test_engine_output_equals_plain_greedy_and_rejected_slots_are_overwritten():
    out, stats = se.run_engine(PROMPTS, target, drafter(0.6), k=4, budget=12, max_new=60)
    assert out == [greedy(p, 60) for p in PROMPTS]
    assert max(stats["scheduled"]) <= 12
    assert stats["overwritten"] > 0  # slots of rejected drafts were written again, never read


def test_tokens_per_verification_follow_the_formula():
    alpha, k = 0.7, 4
    _, stats = se.run_engine(PROMPTS, target, drafter(alpha, 1), k=k, budget=10**6, max_new=1500)
    n = np.array([out for drafts, out in stats["verified"] if drafts == k], dtype=float)
    assert len(n) > 2000
    expected = sd.expected_tokens_per_step(alpha, k)  # (1 - a^(k+1)) / (1 - a) = 2.77
    assert abs(n.mean() - expected) < 4 * n.std() / np.sqrt(len(n))


def test_drafts_take_budget_from_prefill():
    """Four decodes with k = 4 ask for 4 x (1 + 4) = 20 tokens: a budget of 24 leaves 4 for a prefill chunk,
    and a budget of 14 cuts the last decode's drafts (vLLM trims spec tokens the budget cannot hold)."""
    def fresh():
        reqs = [se.Req([1, 2, 3, 9], 10, prompt_len=3) for _ in range(4)]  # decodes with one output token
        for r in reqs:
            r.num_computed, r.kv, r.drafts = 3, [1, 2, 3], [5, 6, 7, 8]
        return reqs + [se.Req(list(range(40)), 5, prompt_len=40)]  # a long prompt waiting for prefill
    reqs = fresh()
    plan = se.engine_step(reqs, target, budget=24, k=4, stats={})
    assert [n for _, n in plan] == [5, 5, 5, 5, 4] and reqs[-1].num_computed == 4
    plan = se.engine_step(fresh(), target, budget=14, k=4, stats={})
    assert [n for _, n in plan] == [5, 5, 4]


def test_speed_up_shrinks_as_the_batch_grows():
    peak, bw = H200["bf16_tensor_dense_tflops"] * 1e12, H200["memory_bandwidth_gbps"] * 1e9
    assert se.verify_free_tokens(peak, bw) == pytest.approx(206.1, abs=0.1)
    alpha, k, c, params = 0.8, 4, 0.05, 8e9
    s = [se.spec_speedup(b, alpha, k, c, params, peak, bw) for b in (1, 8, 32, 64, 128, 512)]
    assert s[0] == pytest.approx(sd.walltime_speedup(alpha, k, c))  # batch 1: the formula of the other page
    assert all(a >= b for a, b in zip(s, s[1:]))
    assert s[0] > 2.5 and s[-1] < 1  # verification is no longer free: speculation now slows decoding down
    assert s[-1] == pytest.approx(sd.expected_tokens_per_step(alpha, k) / (k + 1 + k * c))
    # flat while B (k + 1) <= 206 tokens, i.e. up to batch 41; about break-even at batch 128
    assert se.spec_speedup(41, alpha, k, c, params, peak, bw) == pytest.approx(s[0])
    assert se.spec_speedup(42, alpha, k, c, params, peak, bw) < s[0]
    assert se.spec_speedup(128, alpha, k, c, params, peak, bw) == pytest.approx(1.02, abs=0.01)


# ------------------------------------------------------------------ EAGLE tree
MODEL = se.TinyLM()
PREFIX = [3, 1, 4, 1, 5, 9, 2, 6]


def _draft(noise, seed):
    g = torch.Generator().manual_seed(seed)

    def probs(path):  # stands in for a trained EAGLE head: the target's distribution, perturbed
        toks = PREFIX + list(path)
        n = len(toks)
        logits, _ = MODEL.forward(toks, list(range(n)), torch.ones(n, n, dtype=torch.bool).tril())
        return torch.softmax(logits[-1] + noise * torch.randn(logits.shape[1], generator=g, dtype=torch.float64), 0)
    return probs


def test_tree_mask_is_the_ancestor_relation():
    parents = [-1, 0, 0, 1, 1, 2, 3]
    mask = se.tree_mask(parents)
    assert se.tree_depths(parents) == [0, 1, 1, 2, 2, 2, 3]
    assert mask[6].nonzero().flatten().tolist() == [0, 1, 3, 6]
    assert mask[5].nonzero().flatten().tolist() == [0, 2, 5]
    assert int(mask.sum()) == sum(d + 1 for d in se.tree_depths(parents))


def test_one_tree_pass_equals_verifying_every_path_alone():
    cache = MODEL.prefill(PREFIX[:-1])
    tokens, parents = se.build_dynamic_tree(_draft(1.0, 1), PREFIX[-1], depth=4, topk=3, total=10)
    assert len(tokens) == 11
    assert all(p < i for i, p in enumerate(parents))  # reranking kept every node's ancestors
    logits, accepted, path = se.verify_tree(MODEL, cache, len(PREFIX) - 1, tokens, parents)
    mask, depth = se.tree_mask(parents), se.tree_depths(parents)
    best = 0
    for leaf in range(len(tokens)):
        nodes = mask[leaf].nonzero().flatten().tolist()  # the root-to-leaf path, in order
        n = len(nodes)
        chain, _ = MODEL.forward([tokens[j] for j in nodes], [len(PREFIX) - 1 + depth[j] for j in nodes],
                                 torch.ones(n, n, dtype=torch.bool).tril(), cache)
        torch.testing.assert_close(chain, logits[nodes], rtol=1e-12, atol=1e-12)
        run = 0
        while run + 1 < n and tokens[nodes[run + 1]] == int(chain[run].argmax()):
            run += 1
        best = max(best, run)
    assert len(accepted) == best + 1  # the tree accepts the best path's drafts, plus one target token
    assert accepted == MODEL.greedy(PREFIX, len(accepted))


def test_tree_accepts_more_than_a_chain_of_the_same_depth():
    cache = MODEL.prefill(PREFIX[:-1])
    tree_len, chain_len = [], []
    for seed in range(8):
        for topk, total, out in ((3, 12, tree_len), (1, 4, chain_len)):
            tokens, parents = se.build_dynamic_tree(_draft(2.0, seed), PREFIX[-1], depth=4, topk=topk, total=total)
            out.append(len(se.verify_tree(MODEL, cache, len(PREFIX) - 1, tokens, parents)[1]))
    assert np.mean(tree_len) > np.mean(chain_len)
