"""The KV cache beyond one GPU's memory and beyond full attention (docs/framework/kv-cache-tiers.md).

Six small mechanisms, each asserted by tests/test_framework_kv_tiers.py:
a tiered (GPU -> host -> disk/remote) block cache with write-through / write-back and TensorRT-LLM's
retention priorities; the load-versus-recompute break-even; SGLang's cache-aware router over the repo's
radix tree; vLLM's hybrid KV cache groups; KV eviction (StreamingLLM sinks, H2O) and quantisation on a
tiny random-weight attention; and re-sharding a KV block between tensor-parallel layouts.
Block hashes come from block_manager.py, the radix tree from radix_cache.py, KV sizes from llm_inference.py.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch

from block_manager import block_hash
from llm_inference import AttnConfig, kv_bytes_per_token
from radix_cache import RadixCache

DEFAULT_PRIORITY = 35  # TensorRT-LLM: blocks revert to 35 when their retention duration ends


# --8<-- [start:tiers]
@dataclass
class Block:
    priority: int = DEFAULT_PRIORITY
    expires: int | None = None  # trace step after which the priority reverts to the default
    last_use: int = 0


class TieredKVCache:
    """Full blocks of a prefix cache spread over tiers: 0 = GPU, 1 = host, 2 = disk/remote, ...
    A request hits a prefix of its blocks; each hit block sits in the fastest tier that holds it and
    is copied up to the GPU (the lower copy stays: the tiers are inclusive). Missed blocks are computed
    on the GPU. A full tier evicts by (priority, LRU); the victim moves one tier down unless the lower
    tier already has it (clean) or its priority is below `offload_min_priority` (then it is dropped).
    write_through also copies every newly computed block down all tiers at once."""

    def __init__(self, capacities: list[int], block_size: int, write_policy: str = "write_back",
                 offload_min_priority: int = 0):
        assert write_policy in ("write_back", "write_through")
        self.cap, self.bs, self.policy = capacities, block_size, write_policy
        self.offload_min = offload_min_priority
        self.tiers: list[dict[bytes, Block]] = [{} for _ in capacities]
        self.hits = [0] * len(capacities)  # blocks served from tier i (hits[0]: already on the GPU)
        self.computed = 0  # blocks prefilled from scratch
        self.writes = [0] * len(capacities)  # blocks written into tier i from the tier above
        self.evicted: list[bytes] = []  # keys dropped from the last tier or not offloaded, in order
        self.now = self._clock = 0
        self._pinned: set[bytes] = set()

    def keys(self, tokens) -> list[bytes]:
        keys, parent = [], None
        for i in range(len(tokens) // self.bs):
            parent = block_hash(parent, tuple(tokens[i * self.bs:(i + 1) * self.bs]))
            keys.append(parent)
        return keys

    def _prio(self, b: Block) -> int:
        return b.priority if b.expires is None or self.now < b.expires else DEFAULT_PRIORITY

    def _touch(self, b: Block) -> None:
        self._clock += 1
        b.last_use = self._clock

    def _put(self, t: int, key: bytes, meta: Block) -> None:
        """Place key in tier t, evicting (and cascading down) if the tier is full."""
        tier = self.tiers[t]
        if key not in tier:
            if len(tier) >= self.cap[t]:
                self._evict(t)
            tier[key] = Block(meta.priority, meta.expires)
        tier[key].priority, tier[key].expires = meta.priority, meta.expires
        self._touch(tier[key])

    def _evict(self, t: int) -> None:
        tier = self.tiers[t]
        victim = min((k for k in tier if not (t == 0 and k in self._pinned)),
                     key=lambda k: (self._prio(tier[k]), tier[k].last_use))
        meta = tier.pop(victim)
        lower = t + 1
        if lower < len(self.tiers) and self._prio(meta) >= self.offload_min:
            if victim not in self.tiers[lower]:  # dirty: write it back
                self.writes[lower] += 1
                self._put(lower, victim, meta)
        elif not any(victim in x for x in self.tiers):  # no copy left anywhere
            self.evicted.append(victim)

    def access(self, tokens, retention: list[tuple[int, int, int, int | None]] = ()) -> list[int]:
        """Serve one request. retention: (first_token, end_token, priority, duration_steps) ranges,
        like TensorRT-LLM's TokenRangeRetentionConfig. Returns the tier each block came from
        (len(capacities) for a computed block)."""
        self.now += 1
        keys = self.keys(tokens)
        assert len(keys) <= self.cap[0], "a request must fit on the GPU"
        self._pinned = set(keys)
        src, missed = [], False
        for i, key in enumerate(keys):
            meta = Block()
            for lo, hi, prio, dur in retention:
                if lo <= i * self.bs < hi:
                    meta = Block(prio, None if dur is None else self.now + dur)
            t = None if missed else next((j for j, x in enumerate(self.tiers) if key in x), None)
            if t is None:  # prefix semantics: after the first miss everything is recomputed
                missed = True
                self.computed += 1
                src.append(len(self.tiers))
                self._put(0, key, meta)
                if self.policy == "write_through":
                    for lower in range(1, len(self.tiers)):
                        if key not in self.tiers[lower]:
                            self.writes[lower] += 1
                            self._put(lower, key, meta)
            else:
                self.hits[t] += 1
                src.append(t)
                for j in range(t, 0, -1):  # refresh the LRU position of the lower copies too
                    if key in self.tiers[j]:
                        self._touch(self.tiers[j][key])
                self._put(0, key, meta)
        self._pinned = set()
        return src
# --8<-- [end:tiers]


# --8<-- [start:break-even]
def break_even_bandwidth(cfg: AttnConfig, params: float, flops: float, kv_bytes: float = 2) -> float:
    """Bytes/s above which loading a token's KV beats recomputing it: bytes per token over the
    prefill time per token (2 * params FLOPs at `flops`). Attention FLOPs are left out, which
    favours recompute: with them the break-even bandwidth is lower still."""
    return kv_bytes_per_token(cfg, kv_bytes) * flops / (2 * params)


def load_or_recompute(cfg: AttnConfig, params: float, tokens: int, bandwidth: float, flops: float,
                      latency: float = 0.0) -> tuple[float, float]:
    """(seconds to load `tokens` tokens' KV over a link, seconds to prefill them again). The
    recompute side includes causal attention: 2 * layers * q_heads * head_dim * tokens^2 FLOPs."""
    load = latency + tokens * kv_bytes_per_token(cfg) / bandwidth
    attn = 2 * cfg.layers * cfg.q_heads * cfg.head_dim * tokens ** 2
    return load, (2 * params * tokens + attn) / flops
# --8<-- [end:break-even]


# --8<-- [start:router]
class CacheAwareRouter:
    """SGLang's cache_aware policy: an approximate radix tree per worker, built from the requests the
    router itself sent there. If the load is imbalanced (max - min > abs AND max > rel * min) send to
    the least loaded worker; otherwise to the worker with the longest prefix match if the match covers
    more than cache_threshold of the request, else to the worker with the smallest tree."""

    def __init__(self, n_workers: int, cache_threshold: float = 0.5, balance_abs: int = 32,
                 balance_rel: float = 1.5):
        self.trees = [RadixCache() for _ in range(n_workers)]
        self.load = [0] * n_workers
        self.threshold, self.abs, self.rel = cache_threshold, balance_abs, balance_rel

    def route(self, tokens) -> int:
        hi, lo = max(self.load), min(self.load)
        if hi - lo > self.abs and hi > self.rel * lo:
            w = self.load.index(lo)  # shortest queue
        else:
            matched = [tree.match_prefix(tokens)[0] for tree in self.trees]
            best = max(range(len(matched)), key=lambda i: (matched[i], -i))
            if matched[best] / len(tokens) > self.threshold:
                w = best
            else:
                sizes = [tree.size for tree in self.trees]
                w = sizes.index(min(sizes))
        self.trees[w].insert(tokens)  # even when balancing, the tree learns where the prefix went
        self.load[w] += 1
        return w


def simulate_routing(trace: list[list[int]], n_workers: int, policy: str, in_flight: int = 0,
                     capacity: int | None = None, **router_kw) -> float:
    """Fraction of prompt tokens found in the chosen worker's own radix cache. Each request stays
    in flight (counts as load) for the next `in_flight` arrivals; capacity bounds each worker's
    cache in tokens (LRU eviction of unlocked leaves)."""
    caches = [RadixCache() for _ in range(n_workers)]
    router = CacheAwareRouter(n_workers, **router_kw)
    running: deque[tuple[int, int]] = deque()
    hit = total = 0
    for i, tokens in enumerate(trace):
        while running and running[0][0] <= i:
            router.load[running.popleft()[1]] -= 1
        if policy == "round_robin":
            w = i % n_workers
            router.load[w] += 1
        else:
            w = router.route(tokens)
        running.append((i + 1 + in_flight, w))
        hit += caches[w].match_prefix(tokens)[0]
        total += len(tokens)
        caches[w].insert(tokens)
        if capacity is not None and caches[w].size > capacity:
            caches[w].evict(caches[w].size - capacity)
    return hit / total
# --8<-- [end:router]


# --8<-- [start:hybrid]
@dataclass(frozen=True)
class LayerSpec:
    kind: str  # "full", "sliding" or "mamba"
    bytes_per_token: int = 0  # attention: K+V bytes of one token in one layer
    window: int = 0  # sliding
    state_bytes: int = 0  # mamba: the whole recurrent state of one sequence in one layer


def kv_cache_groups(layers: list[LayerSpec]) -> list[list[int | None]]:
    """vLLM's grouping: layers of one kind share a block table; every group has the same number of
    layers (the smallest count among the kinds), so all groups have the same page size; the last
    group of a kind is padded with None."""
    kinds: dict[LayerSpec, list[int]] = {}
    for i, spec in enumerate(layers):
        kinds.setdefault(spec, []).append(i)
    size = min(len(ids) for ids in kinds.values())
    groups = []
    for ids in kinds.values():
        for g in range(0, len(ids), size):
            chunk = ids[g:g + size]
            groups.append(chunk + [None] * (size - len(chunk)))
    return groups


def blocks_needed(spec: LayerSpec, tokens: int, block_size: int) -> int:
    """Blocks one group needs for a sequence of `tokens` tokens, before the next token is computed."""
    if spec.kind == "full":
        return -(-tokens // block_size)
    if spec.kind == "sliding":  # only the blocks covering the last window-1 tokens stay
        first = max(0, tokens - spec.window + 1) // block_size
        return (tokens - 1) // block_size - first + 1
    return 1  # mamba: one (padded) state per sequence


def mamba_block_size(attn_bytes_per_token: int, state_bytes: int, align: int = 16) -> int:
    """Attention block size that makes one attention page at least as large as a Mamba state
    (vLLM's rule for a single page size), rounded up to `align` tokens."""
    return -(-math.ceil(state_bytes / attn_bytes_per_token) // align) * align


def hybrid_kv_bytes(layers: list[LayerSpec], tokens: int, block_size: int) -> int:
    """Bytes the grouped, paged allocation holds for one sequence. One pool, one page size: the
    largest group page (layers per group x block_size x bytes per token, or x state bytes for
    Mamba); smaller pages and the padding layers of the last group are wasted."""
    groups = kv_cache_groups(layers)
    specs = [layers[next(i for i in g if i is not None)] for g in groups]
    unit = [s.state_bytes if s.kind == "mamba" else block_size * s.bytes_per_token for s in specs]
    page = max(len(g) * u for g, u in zip(groups, unit))
    return sum(blocks_needed(s, tokens, block_size) for s in specs) * page


# --8<-- [end:hybrid]


# --8<-- [start:compress]
def toy_attention_inputs(T: int = 256, d: int = 32, n_heavy: int = 8, seed: int = 0):
    """q, k, v [T, d] from a random-weight attention layer over hidden states x_t = c + noise.
    Like trained models, token 0 (BOS) and a few 'heavy' tokens have keys aligned with the shared
    query direction W_q c, so they draw attention from every later query: the sink and the heavy hitters."""
    g = torch.Generator().manual_seed(seed)
    wq, wk, wv = (torch.randn(d, d, generator=g, dtype=torch.float64) / d ** 0.5 for _ in range(3))
    c = torch.randn(d, generator=g, dtype=torch.float64)
    x = c + torch.randn(T, d, generator=g, dtype=torch.float64)
    u = wk.T @ (wq @ c)
    u = u / u.norm()  # hidden direction whose key scores high against the shared query
    heavy = torch.randperm(T - 1, generator=g)[:n_heavy] + 1
    x[0] += 4.0 * u
    x[heavy] += 2.5 * u
    return x @ wq.T, x @ wk.T, x @ wv.T, heavy


def decode_with_eviction(q, k, v, policy: str, budget: int, sinks: int = 4):
    """Decode step by step; after step t the cache may hold at most `budget` tokens.
    full: keep all; window: the last `budget`; sink: StreamingLLM, the first `sinks` plus the last
    budget - sinks; h2o: the last budget//2 plus the budget - budget//2 tokens with the largest
    accumulated attention. Returns the outputs [T, d] and the largest cache size."""
    T, d = q.shape
    keep: list[int] = []
    score = torch.zeros(T, dtype=q.dtype)  # H2O: attention each token has received so far
    out = torch.empty_like(q)
    peak = 0
    for t in range(T):
        keep.append(t)
        idx = torch.tensor(keep)
        p = torch.softmax(k[idx] @ q[t] / d ** 0.5, dim=0)
        out[t] = p @ v[idx]
        score[idx] += p
        peak = max(peak, len(keep))
        if policy == "full" or len(keep) <= budget:
            continue
        if policy == "window":
            keep = keep[-budget:]
        elif policy == "sink":
            keep = keep[:sinks] + keep[-(budget - sinks):]
        elif policy == "h2o":
            recent = budget // 2
            old = keep[:-recent]
            top = sorted(old, key=lambda j: -score[j].item())[:budget - recent]
            keep = sorted(top) + keep[-recent:]
        else:
            raise ValueError(policy)
    return out, peak


def quantize_kv(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric per-token absmax quantisation, returned dequantised."""
    qmax = 2 ** (bits - 1) - 1
    scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / qmax
    return torch.round(x / scale).clamp(-qmax, qmax) * scale


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out - ref).norm() / ref.norm()).item()
# --8<-- [end:compress]


# --8<-- [start:reshard]
def heads_of(rank: int, tp: int, n_kv: int) -> range:
    """Global KV heads held by a rank. tp <= n_kv: n_kv/tp heads each; tp > n_kv: each head is
    replicated on tp/n_kv consecutive ranks (as in GQA tensor parallelism)."""
    if tp <= n_kv:
        per = n_kv // tp
        return range(rank * per, (rank + 1) * per)
    h = rank // (tp // n_kv)
    return range(h, h + 1)


def shard(kv: torch.Tensor, tp: int, head_dim: int) -> list[torch.Tensor]:
    """Split a KV block tensor along its head axis the way a TP=tp engine holds it."""
    n_kv = kv.shape[head_dim]
    return [kv.narrow(head_dim, heads_of(r, tp, n_kv).start, len(heads_of(r, tp, n_kv))).clone()
            for r in range(tp)]


def reshard_plan(n_kv: int, a: int, b: int) -> list[list[tuple[int, range]]]:
    """For every decode rank (TP=b): the reads (prefill rank at TP=a, global heads) that assemble
    its shard. A head replicated on several prefill ranks is read once, from the first."""
    plan = []
    for r in range(b):
        reads, need = [], heads_of(r, b, n_kv)
        for src in range(a):
            have = heads_of(src, a, n_kv)
            lo, hi = max(need.start, have.start), min(need.stop, have.stop)
            if lo < hi and not any(lo in got for _, got in reads):
                reads.append((src, range(lo, hi)))
        plan.append(reads)
    return plan


def reshard(shards: list[torch.Tensor], n_kv: int, b: int, head_dim: int) -> list[torch.Tensor]:
    """Build the TP=b shards from the TP=a shards by following reshard_plan."""
    a = len(shards)
    out = []
    for reads in reshard_plan(n_kv, a, b):
        pieces = [shards[src].narrow(head_dim, hs.start - heads_of(src, a, n_kv).start, len(hs))
                  for src, hs in reads]
        out.append(torch.cat(pieces, dim=head_dim))
    return out


def segments_per_block(layout: str, heads_read: int, heads_local: int, block_size: int) -> int:
    """Contiguous memory runs one read of `heads_read` of a block's `heads_local` heads touches.
    HND ([heads, block, d]): a head range is one run. NHD ([block, heads, d]): one run per token,
    unless the read takes every head of the block."""
    if layout == "HND" or heads_read == heads_local:
        return 1
    return block_size
# --8<-- [end:reshard]
