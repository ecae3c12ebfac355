"""Speculative decoding inside a batching engine, and EAGLE-style tree drafting
(docs/framework/engine-spec-decode.md). The acceptance rule and the tokens-per-step formula are in
spec_decode.py (docs/framework/speculative-decoding.md); this module is about what the engine around them
does: the token budget, the KV slots of rejected drafts, batch size, and verifying a tree of drafts."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from spec_decode import expected_tokens_per_step


# --8<-- [start:engine]
@dataclass
class Req:
    tokens: list[int]  # prompt + accepted output; the last one has no KV yet
    max_new: int
    prompt_len: int = 0
    num_computed: int = 0  # positions whose KV is valid (vLLM: num_computed_tokens)
    kv: list = field(default_factory=list)  # kv[p]: the token whose K/V sits in slot p
    drafts: list[int] = field(default_factory=list)

    def done(self):
        return len(self.tokens) - self.prompt_len >= self.max_new


def engine_step(reqs: list[Req], target: Callable, budget: int, k: int, stats: dict):
    """One step of a budgeted engine with greedy speculative decoding.

    Running decodes are scheduled first, each asking for 1 + len(drafts) tokens (its last token plus the
    drafts); the drafts are cut when the budget runs short. Prefill chunks take what is left. Every
    scheduled position writes its slot; after verification num_computed moves back over the rejected
    drafts (vLLM: num_computed_tokens -= num_rejected), so their slots are written again next step."""
    decodes = [r for r in reqs if len(r.tokens) > r.prompt_len and not r.done()]
    prefills = [r for r in reqs if len(r.tokens) == r.prompt_len]  # no token sampled yet
    left, plan = budget, []
    for r in decodes:
        if left == 0:
            break
        n = min(1 + len(r.drafts), left)
        r.drafts = r.drafts[: n - 1]  # drafts that did not fit are dropped
        plan.append((r, n))
        left -= n
    for r in prefills:
        n = min(len(r.tokens) - r.num_computed, left)
        if n:
            plan.append((r, n))
            left -= n
    stats.setdefault("scheduled", []).append(budget - left)
    for r, n in plan:
        fed = (r.tokens + r.drafts)[r.num_computed: r.num_computed + n]
        start = r.num_computed
        for i, tok in enumerate(fed):  # write KV slots start .. start+n-1
            p = start + i
            if p < len(r.kv):
                stats["overwritten"] = stats.get("overwritten", 0) + (r.kv[p] is not None)
                r.kv[p] = tok
            else:
                r.kv.append(tok)
        assert r.kv[:start + n] == (r.tokens + r.drafts)[:start + n]  # reads see only the right tokens
        if start + n < len(r.tokens):  # a prefill chunk that does not reach the prompt's end: no sample
            r.num_computed += n
            continue
        # the target's greedy prediction after each fed position, reading the KV slots 0 .. p
        preds = [target(r.kv[: p + 1]) for p in range(len(r.tokens) - 1, start + n)]
        accepted = 0
        while accepted < len(r.drafts) and r.drafts[accepted] == preds[accepted]:
            accepted += 1
        new = r.drafts[:accepted] + [preds[accepted]]  # accepted drafts + correction or bonus
        r.num_computed = start + n - (len(r.drafts) - accepted)  # roll back over rejected drafts
        stats.setdefault("verified", []).append((len(r.drafts), len(new)))  # (drafts checked, tokens out)
        r.tokens += new
        r.drafts = []
        del r.tokens[r.prompt_len + r.max_new:]
    return plan


def run_engine(prompts: Sequence[list[int]], target, draft, k, budget, max_new):
    """Serve all prompts to completion; draft(ctx) proposes the next token (called k times per step)."""
    reqs = [Req(list(p), max_new, prompt_len=len(p)) for p in prompts]
    stats: dict = {}
    while not all(r.done() for r in reqs):
        for r in reqs:
            if len(r.tokens) > r.prompt_len and not r.done():
                r.drafts = []
                for _ in range(k):
                    r.drafts.append(draft(r.tokens + r.drafts))
        engine_step(reqs, target, budget, k, stats)
    return [r.tokens[r.prompt_len:] for r in reqs], stats
# --8<-- [end:engine]


# --8<-- [start:batch]
def spec_speedup(batch: int, alpha: float, k: int, c: float, params: float,
                 peak_flops: float, hbm_bw: float, w_bytes: float = 2) -> float:
    """Decode speed-up of speculation at a batch size, on a weights-only roofline.

    A target step over n tokens costs max(2 P n / F, P w / BW). Plain decoding spends t(B) per B tokens;
    speculation spends t(B (k+1)) to verify plus k draft steps (c t(B) each), and yields B E[N] tokens."""
    def t(n):
        return max(2 * params * n / peak_flops, params * w_bytes / hbm_bw)
    return expected_tokens_per_step(alpha, k) * t(batch) / (t(batch * (k + 1)) + k * c * t(batch))


def verify_free_tokens(peak_flops: float, hbm_bw: float, w_bytes: float = 2) -> float:
    """Tokens per step below which a step costs the same as one token: n* = F w / (2 BW)."""
    return peak_flops * w_bytes / (2 * hbm_bw)
# --8<-- [end:batch]


# --8<-- [start:tree-mask]
def tree_mask(parents: Sequence[int]) -> torch.Tensor:
    """mask[i, j] = node j is node i or one of its ancestors. Node 0 is the root (the last accepted
    token), parents[0] = -1; parents must come before their children."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(parents):
        mask[i, i] = True
        if p >= 0:
            assert p < i
            mask[i] |= mask[p]
    return mask


def tree_depths(parents: Sequence[int]) -> list[int]:
    depth: list[int] = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    return depth
# --8<-- [end:tree-mask]


class TinyLM:
    """A random-weight decoder (learned positions, single-head attention, residual MLP-free layers),
    float64, with an explicit KV cache and an explicit attention mask over the new tokens."""

    def __init__(self, vocab=32, dim=16, layers=2, max_pos=64, seed=0):
        g = torch.Generator().manual_seed(seed)

        def rnd(*s, scale=1.0):
            return torch.randn(*s, generator=g, dtype=torch.float64) * scale
        self.emb, self.pos = rnd(vocab, dim), rnd(max_pos, dim, scale=0.5)
        self.layers = [[rnd(dim, dim, scale=dim**-0.5) for _ in range(4)] for _ in range(layers)]
        self.head = rnd(dim, vocab, scale=2 * dim**-0.5)
        self.dim = dim

    # --8<-- [start:tree-forward]
    def forward(self, tokens, positions, new_mask, cache=None):
        """tokens (n,), positions (n,), new_mask (n, n) bool over the new tokens; every new token sees the
        whole cache. Returns logits (n, V) and the per-layer (K, V) of the new tokens."""
        h = self.emb[torch.as_tensor(tokens)] + self.pos[torch.as_tensor(positions)]
        n, kv = len(tokens), []
        for li, (wq, wk, wv, wo) in enumerate(self.layers):
            q, kk, vv = h @ wq, h @ wk, h @ wv
            kv.append((kk, vv))
            if cache is not None:
                kk, vv = torch.cat([cache[li][0], kk]), torch.cat([cache[li][1], vv])
            mask = torch.cat([torch.ones(n, len(kk) - n, dtype=torch.bool), new_mask], dim=1)
            s = (q @ kk.T / math.sqrt(self.dim)).masked_fill(~mask, float("-inf"))
            h = h + torch.softmax(s, dim=1) @ vv @ wo
        return h @ self.head, kv
    # --8<-- [end:tree-forward]

    def prefill(self, tokens):
        n = len(tokens)
        _, kv = self.forward(tokens, list(range(n)), torch.ones(n, n, dtype=torch.bool).tril())
        return kv

    def greedy(self, tokens, steps):
        out = list(tokens)
        for _ in range(steps):
            logits, _ = self.forward(out, list(range(len(out))),
                                     torch.ones(len(out), len(out), dtype=torch.bool).tril())
            out.append(int(logits[-1].argmax()))
        return out[len(tokens):]


# --8<-- [start:tree-verify]
def verify_tree(model: TinyLM, cache, prefix_len: int, tokens: Sequence[int], parents: Sequence[int]):
    """One target pass over the whole tree: positions prefix_len + depth, the ancestor mask.
    Greedy acceptance walks down from the root, following the child that equals the target's argmax;
    returns (logits of every node, accepted tokens incl. the bonus one, accepted node path)."""
    depth = tree_depths(parents)
    logits, _ = model.forward(list(tokens), [prefix_len + d for d in depth], tree_mask(parents), cache)
    node, path = 0, [0]
    while True:
        want = int(logits[node].argmax())
        child = [c for c in range(len(parents)) if parents[c] == node and tokens[c] == want]
        if not child:
            return logits, [tokens[i] for i in path[1:]] + [want], path
        node = child[0]
        path.append(node)


def build_dynamic_tree(draft_probs: Callable, root_token: int, depth: int, topk: int, total: int):
    """EAGLE-2's tree: a node's value is the product of draft confidences on its path (an estimate of
    its acceptance probability). Expansion: at each depth expand the topk highest-value nodes, each
    with its topk most likely children. Rerank: keep the `total` highest-value non-root nodes; as a
    value never exceeds its parent's, the kept set contains all its ancestors. Returns (tokens, parents)."""
    nodes = [(root_token, -1, 1.0, ())]  # (token, parent, value, path of tokens after the root)
    frontier = [0]
    for _ in range(depth):
        children = []
        for i in frontier:
            tok, _, val, path = nodes[i]
            p = draft_probs(path)
            top = torch.topk(p, topk)
            for pr, t in zip(top.values.tolist(), top.indices.tolist()):
                nodes.append((t, i, val * pr, path + (t,)))
                children.append(len(nodes) - 1)
        frontier = sorted(children, key=lambda j: -nodes[j][2])[:topk]
    keep = sorted(range(1, len(nodes)), key=lambda j: (-nodes[j][2], j))[:total]
    keep = [0] + sorted(keep)  # creation order puts parents first
    index = {old: new for new, old in enumerate(keep)}
    return [nodes[j][0] for j in keep], [index.get(nodes[j][1], -1) for j in keep]
# --8<-- [end:tree-verify]
