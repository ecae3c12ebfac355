"""code/framework/{llm_inference,block_manager}.py against formulas, hand counts and dense attention."""
from __future__ import annotations

import random
import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "framework"))
import block_manager as bm  # noqa: E402
import llm_inference as li  # noqa: E402


# ---------- llm_inference ----------

def test_kv_bytes_of_published_configs():
    assert li.kv_bytes_per_token(li.LLAMA2_7B) == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert li.kv_bytes_per_token(li.LLAMA31_8B) == 128 * 1024
    assert li.kv_bytes_per_token(li.LLAMA31_70B) == 320 * 1024
    assert li.kv_bytes_per_token(li.QWEN25_7B) == 56 * 1024
    assert li.kv_bytes_per_token(li.DEEPSEEK_V3) == 61 * 576 * 2
    assert li.kv_bytes_per_request(li.LLAMA31_70B, 32768) == 10 * 2**30
    assert [c.kind for c in (li.LLAMA2_7B, li.LLAMA31_8B, li.DEEPSEEK_V3)] == ["MHA", "GQA", "MLA"]
    assert li.AttnConfig("mqa", 2, 8, 1, 64).kind == "MQA"


def test_decode_bound_matches_bandwidth_over_bytes():
    n = 8.03e9
    t = li.decode_tokens_per_s(n, li.LLAMA31_8B, 1, 0, li.H200_BF16_FLOPS, li.H200_HBM_BW)
    assert t == pytest.approx(li.H200_HBM_BW / (2 * n)) and round(t) == 299
    # FP8 weights halve the bytes and double the bound
    t8 = li.decode_tokens_per_s(n, li.LLAMA31_8B, 1, 0, li.H200_BF16_FLOPS, li.H200_HBM_BW, w_bytes=1)
    assert t8 == pytest.approx(2 * t)


@pytest.mark.parametrize("batch,ctx,intensity,ms,tps", [
    (1, 0, 1.0, 3.35, 299), (32, 0, 32.0, 3.35, 9564), (32, 4096, 17.5, 6.92, 4621),
    (128, 4096, 27.5, 17.66, 7247), (256, 0, 256.0, 4.15, 61613),
])
def test_decode_table_on_the_page(batch, ctx, intensity, ms, tps):
    n = 8.03e9
    f, m = li.decode_step(n, li.LLAMA31_8B, batch, ctx)
    assert round(f / m, 1) == intensity
    assert round(max(f / li.H200_BF16_FLOPS, m / li.H200_HBM_BW) * 1e3, 2) == ms
    assert round(li.decode_tokens_per_s(n, li.LLAMA31_8B, batch, ctx, li.H200_BF16_FLOPS, li.H200_HBM_BW)) == tps


def test_attention_intensity_is_the_gqa_group():
    # params = 0 isolates attention: FLOPs / bytes = h / n_kv
    for kv in (32, 8, 1):
        cfg = li.AttnConfig("x", 32, 32, kv, 128)
        f, m = li.decode_step(0, cfg, 4, 1000)
        assert f / m == pytest.approx(32 / kv)


# ---------- block manager ----------

def test_allocate_append_free_counts():
    m = bm.BlockManager(num_blocks=8, block_size=4, prefix_caching=False)
    m.allocate(0, list(range(6)))  # 2 blocks
    assert m.num_free() == 6 and len(m.tables[0]) == 2
    for t in range(2):
        assert m.append(0, 100 + t) is None  # fills block 2 to 8 tokens, no new block
    assert len(m.tables[0]) == 2
    m.append(0, 200)  # token 9 opens a third block
    assert len(m.tables[0]) == 3 and m.num_free() == 5
    m.free_seq(0)
    assert m.num_free() == 8 and all(r == 0 for r in m.ref)
    with pytest.raises(bm.OutOfBlocks):
        m.allocate(1, list(range(33)))
    assert m.num_free() == 8


def test_fork_shares_then_copies_on_write():
    m = bm.BlockManager(num_blocks=16, block_size=4, prefix_caching=False)
    m.allocate(0, list(range(6)))  # blocks: full + partial(2)
    m.fork(0, 1)
    m.fork(0, 2)
    assert m.tables[1] == m.tables[0] and m.ref[m.tables[0][1]] == 3
    used_before = 16 - m.num_free()
    src = m.tables[0][1]
    cp = m.append(1, 7)  # writes into the shared partial block -> copy
    assert cp is not None and cp[0] == src and m.tables[1][1] == cp[1] != src
    assert m.ref[src] == 2 and 16 - m.num_free() == used_before + 1
    assert m.tables[1][0] == m.tables[0][0]  # the full block stays shared
    cp2 = m.append(2, 8)
    assert cp2 is not None
    assert m.append(0, 9) is None  # last owner writes in place
    assert m.ref[src] == 1
    for s in (0, 1, 2):
        m.free_seq(s)
    assert m.num_free() == 16


def test_prefix_caching_reuses_full_blocks_only():
    m = bm.BlockManager(num_blocks=16, block_size=4)
    sys_prompt = list(range(10))  # 2 full blocks + 2 tokens
    assert m.allocate(0, sys_prompt + [50, 51]) == 0  # 12 tokens, 3 full blocks, nothing cached yet
    assert m.allocate(1, sys_prompt + [60, 61, 62]) == 8  # shares the first 2 full blocks
    assert m.tables[1][:2] == m.tables[0][:2] and m.tables[1][2] != m.tables[0][2]
    # same tokens at a different position do not match: the hash is chained
    assert m.allocate(2, list(range(4, 8)) + list(range(4))) == 0
    # cached blocks survive the free of their owners and are reused later
    m.free_seq(0)
    m.free_seq(1)
    assert m.allocate(3, sys_prompt + [50, 51, 99]) == 12
    assert m.hits == 2 + 3


def test_lru_eviction_of_cached_blocks():
    m = bm.BlockManager(num_blocks=4, block_size=2)
    m.allocate(0, [1, 2, 3, 4])
    m.free_seq(0)  # 2 cached free blocks
    m.allocate(1, [9, 9, 8, 8, 7, 7])  # needs 3 blocks: evicts the oldest free ones
    assert m.allocate(2, [5, 5]) == 0
    m.free_seq(1)
    m.free_seq(2)
    assert m.allocate(3, [1, 2, 3, 4]) == 0  # the old prefix was evicted


def test_random_ops_keep_refcounts_consistent():
    rng = random.Random(0)
    m = bm.BlockManager(num_blocks=64, block_size=4)
    live, nxt = [], 0
    for _ in range(400):
        op = rng.random()
        try:
            if op < 0.3 or not live:
                m.allocate(nxt, [rng.randrange(3) for _ in range(rng.randrange(1, 12))])
                live.append(nxt)
                nxt += 1
            elif op < 0.4:
                m.fork(rng.choice(live), nxt)
                live.append(nxt)
                nxt += 1
            elif op < 0.85:
                m.append(rng.choice(live), rng.randrange(3))
            else:
                m.free_seq(live.pop(rng.randrange(len(live))))
        except bm.OutOfBlocks:
            m.free_seq(live.pop(0))
        counts = [0] * 64
        for table in m.tables.values():
            for b in table:
                counts[b] += 1
        assert counts == m.ref
        assert set(m.free) == {b for b in range(64) if m.ref[b] == 0}
        for s, table in m.tables.items():
            assert len(table) == -(-len(m.tokens[s]) // 4)


def test_paged_attention_equals_contiguous():
    torch.manual_seed(0)
    heads, kv_heads, d, bs, nblocks = 8, 2, 16, 4, 32
    m = bm.BlockManager(nblocks, bs, prefix_caching=False)
    k_cache = torch.zeros(nblocks, bs, kv_heads, d, dtype=torch.float64)
    v_cache = torch.zeros_like(k_cache)
    seqs = {0: 13, 1: 7, 2: 16}
    dense = {}
    for s, n in seqs.items():
        m.allocate(s, [0] * n)
        k, v = torch.randn(n, kv_heads, d, dtype=torch.float64), torch.randn(n, kv_heads, d, dtype=torch.float64)
        for pos in range(n):
            slot = m.slot(s, pos)
            k_cache.view(-1, kv_heads, d)[slot], v_cache.view(-1, kv_heads, d)[slot] = k[pos], v[pos]
        dense[s] = (k, v)
    for s, n in seqs.items():
        q = torch.randn(heads, d, dtype=torch.float64)
        out = bm.paged_attention(q, k_cache, v_cache, m.tables[s], n)
        k, v = dense[s]
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[:, None, :], k.transpose(0, 1).repeat_interleave(4, 0), v.transpose(0, 1).repeat_interleave(4, 0))[:, 0]
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_waste_formulas():
    trace = [(10, 5), (100, 1), (3, 30)]
    used = sum(p + t for p, o in trace for t in range(1, o + 1))
    assert bm.waste_over_trace(trace, "contiguous", max_len=256) == pytest.approx(1 - used / (36 * 256))
    w = bm.waste_over_trace(trace, "paged", block_size=16)
    # per step at most block_size - 1 empty slots
    assert 0 < w < 1 and all(bm.reserved_tokens(u, "paged", 16) - u < 16 for u in range(1, 500))
    assert bm.waste_over_trace([(16, 16)], "paged", block_size=16) == pytest.approx(
        1 - sum(16 + t for t in range(1, 17)) / sum(32 for _ in range(16)))


# ---------- speculative decoding ----------
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

import spec_decode as sd  # noqa: E402


def _tables(v=5, seed=0, temp=1.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(v, v)) * 1.5
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    ql = logits + rng.normal(size=(v, v)) * temp
    q = np.exp(ql) / np.exp(ql).sum(1, keepdims=True)
    return p, q


def test_expected_tokens_formula():
    assert sd.expected_tokens_per_step(0.0, 4) == 1
    assert sd.expected_tokens_per_step(1.0, 4) == 5
    assert sd.expected_tokens_per_step(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)
    assert sd.acceptance_rate(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == 0.5
    assert sd.walltime_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)


def test_first_two_tokens_follow_the_target():
    p, q = _tables()
    rng = np.random.default_rng(1)
    n = 6000
    counts = np.zeros(25)
    for _ in range(n):
        a, b = sd.generate(sd.bigram(p), sd.bigram(q), [0], 2, k=3, rng=rng)
        counts[a * 5 + b] += 1
    expected = (p[0][:, None] * p).ravel() * n
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # the draft's own distribution is far from it: the same test rejects it
    expected_q = (q[0][:, None] * q).ravel() * n
    assert stats.chisquare(counts, expected_q).pvalue < 1e-6


def test_mean_tokens_per_step_matches_formula_at_constant_alpha():
    v, alpha, k = 6, 0.7, 4
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(v - 1), size=v)
    p = np.hstack([p, np.zeros((v, 1))])  # token v-1 is never produced by the target
    q = alpha * p
    q[:, -1] += 1 - alpha  # so sum min(p, q) = alpha in every context
    assert all(sd.acceptance_rate(p[i], q[i]) == pytest.approx(alpha) for i in range(v))
    tokens = [len(sd.speculative_step(sd.bigram(p), sd.bigram(q), [0], k, rng)[0]) for _ in range(4000)]
    se = np.std(tokens) / np.sqrt(len(tokens))
    assert abs(np.mean(tokens) - sd.expected_tokens_per_step(alpha, k)) < 4 * se


# ---------- ONNX Runtime optimisation levels ----------
import ort_levels  # noqa: E402


def test_ort_levels_fuse_and_match_pytorch(tmp_path):
    torch.manual_seed(0)
    model = ort_levels.TinyBlock().eval()
    x = torch.randn(2, 16, 32)
    path = ort_levels.export(model, x, tmp_path / "tiny.onnx")
    raw = ort_levels.op_counts(path)
    assert "ai.onnx:BatchNormalization" not in raw  # the exporter folds eval-mode BN into Conv
    assert raw["ai.onnx:ReduceMean"] == 4 and raw["ai.onnx:Erf"] == 1  # LayerNorm and GELU decomposed
    with torch.no_grad():
        x2 = torch.randn(3, 9, 32)  # another batch and length: dynamic axes
        ref = model(x2).numpy()
    counts = {}
    for level in ort_levels.LEVELS:
        y, counts[level] = ort_levels.run_at_level(path, level, x2.numpy(), tmp_path)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert sum(counts["basic"].values()) < sum(counts["disable_all"].values())
    ext = counts["extended"]
    assert ext["ai.onnx:LayerNormalization"] == 2 and ext["ai.onnx:ReduceMean"] == 0
    assert ext["com.microsoft:FusedConv"] == 1 and ext["ai.onnx:Relu"] == 0
    assert ext["com.microsoft:BiasGelu"] == 1 and ext["ai.onnx:Erf"] == 0


# ---------- radix cache and PD transfer ----------
import radix_cache as rc  # noqa: E402


def test_radix_insert_match_split():
    c = rc.RadixCache()
    assert c.insert([1, 2, 3, 4, 5]) == 5
    assert c.insert([1, 2, 3, 9, 9]) == 2  # shares 3 tokens: the edge is split
    assert c.size == 7
    assert c.match_prefix([1, 2, 3, 4, 5, 6])[0] == 5
    assert c.match_prefix([1, 2, 7])[0] == 2  # match ending inside an edge
    assert c.match_prefix([8])[0] == 0
    assert set(c.root.children) == {1}
    assert c.size == 7  # splitting never changes the number of cached tokens


def test_radix_lru_eviction_respects_locks():
    c = rc.RadixCache()
    c.insert([1, 2, 3, 4])
    c.insert([1, 2, 5, 6])
    c.insert([7, 8])
    _, node = c.match_prefix([1, 2, 5, 6])  # touch: now most recent
    c.lock(node, +1)  # a running request uses [1, 2, 5, 6]
    assert c.evict(2) == 2  # oldest unlocked leaf is [3, 4]
    assert c.match_prefix([1, 2, 3, 4])[0] == 2
    assert c.evict(100) == 2  # only [7, 8] can go; the locked path stays
    assert c.match_prefix([1, 2, 5, 6])[0] == 4 and c.size == 4
    c.lock(node, -1)
    assert c.evict(100) == 4 and c.size == 0


def test_longest_prefix_first_order():
    c = rc.RadixCache()
    c.insert(list(range(10)))
    waiting = [[50, 51], list(range(3)) + [99], list(range(8)) + [77]]
    assert rc.longest_prefix_first(c, waiting) == [waiting[2], waiting[1], waiting[0]]


def test_kv_transfer_fraction():
    r = li.kv_transfer_over_prefill(70.6e9, li.LLAMA31_70B, 50e9, li.H200_BF16_FLOPS)
    assert r == pytest.approx((327680 / 50e9) / (2 * 70.6e9 / 989.5e12))
    assert round(r * 100, 1) == 4.6
    assert round(li.kv_transfer_over_prefill(8.03e9, li.LLAMA31_8B, 50e9, li.H200_BF16_FLOPS) * 100) == 16
    assert round(li.kv_transfer_over_prefill(37e9, li.DEEPSEEK_V3, 50e9, li.H200_BF16_FLOPS) * 100, 1) == 1.9


# ---------- recommendation inference ----------
import recsys  # noqa: E402


def test_jagged_lookup_equals_padded():
    torch.manual_seed(0)
    table = torch.randn(100, 8, dtype=torch.float64)
    lengths = torch.tensor([3, 0, 1, 7, 2])
    values = torch.randint(0, 100, (int(lengths.sum()),))
    out = recsys.jagged_pooled_lookup(table, values, lengths)
    torch.testing.assert_close(out, recsys.padded_pooled_lookup(table, values, lengths))
    assert torch.all(out[1] == 0)  # an empty bag pools to zero
    torch.testing.assert_close(out[0], table[values[:3]].sum(0))


def test_hot_row_cache_hit_rates():
    p = recsys.zipf_probs(10_000, 1.05)
    top1 = recsys.static_cache_hit_rate(p, 100)
    assert top1 == pytest.approx(p[:100].sum())
    assert 0.4 < top1 < 0.9  # 1% of the rows serve most lookups
    rng = np.random.default_rng(0)
    ids = rng.choice(10_000, size=50_000, p=p)
    lru = recsys.lru_hit_rate(ids, 100)
    assert lru < top1 + 0.01  # an LRU cache of the same size cannot beat knowing the distribution
    assert lru > 0.5 * top1


def test_hot_row_numbers_on_the_page():
    p = recsys.zipf_probs(10**7, 1.05)
    assert round(recsys.static_cache_hit_rate(p, 10**5), 2) == 0.80
    assert round(recsys.static_cache_hit_rate(p, 10**6), 2) == 0.91
