"""code/framework/mini_engine.py (docs/framework/mini-engine.md): a small engine with its own paged KV cache,
prefix caching, chunked prefill, preemption by recomputation and the batched sampler gives every request
exactly the tokens transformers' generate() gives it alone."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
import mini_engine as me  # noqa: E402
from sampler import SamplingParams  # noqa: E402

V, BS = 200, 4
SHARED = 18  # two requests share their first 18 prompt tokens: 4 full blocks of 4


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    m = LlamaForCausalLM(cfg).eval().double()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    yield m
    torch.set_num_threads(threads)


def workload():
    """8 requests: prompt lengths 3..30, arrivals at steps 0..5, 3..9 new tokens; r0 and r5 share a prefix."""
    g = torch.Generator().manual_seed(1)
    toks = lambda n: torch.randint(1, V, (n,), generator=g).tolist()  # noqa: E731
    shared = toks(SHARED)
    spec = [  # (prompt, arrival, max_tokens)
        (shared + toks(5), 0, 6), (toks(3), 0, 9), (toks(30), 1, 4), (toks(11), 1, 7),
        (toks(7), 2, 8), (shared + toks(9), 3, 5), (toks(16), 4, 3), (toks(5), 5, 8),
    ]
    return [me.Request(f"r{i}", p, m, arrival=a) for i, (p, a, m) in enumerate(spec)]


_REF: dict[str, list[int]] = {}


def reference(model, r: me.Request) -> list[int]:
    if r.rid not in _REF:
        p = torch.tensor([r.prompt])
        out = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=r.max_tokens, do_sample=False)
        _REF[r.rid] = out[0, len(r.prompt):].tolist()
    return _REF[r.rid]


def test_greedy_equals_generate_and_prefix_hit(model):
    reqs = workload()
    eng = me.MiniEngine(model, num_blocks=96, block_size=BS, max_num_batched_tokens=64)
    out = eng.run(reqs)
    for r in reqs:
        assert out[r.rid] == reference(model, r), r.rid
    # r5 finds r0's 4 full shared blocks: 16 prefill tokens never recomputed
    saved = (SHARED // BS) * BS
    assert eng.stats["prefix_hit_tokens"] == saved
    assert eng.stats["preemptions"] == 0
    # every prompt token once, minus the hit, plus one decode row per generated token but the last
    assert eng.stats["forward_tokens"] == sum(len(r.prompt) + r.max_tokens - 1 for r in reqs) - saved


def test_preemption_by_recomputation(model):
    reqs = workload()
    eng = me.MiniEngine(model, num_blocks=14, block_size=BS, max_num_batched_tokens=64)  # 56 KV slots
    out = eng.run(reqs)
    assert eng.stats["preemptions"] > 0 and any(k > 0 for _, k in eng.preempted)  # preempted mid-decode
    # rows really recomputed: more forward rows than the same workload without preemption (first test)
    base = sum(len(r.prompt) + r.max_tokens - 1 for r in reqs)
    assert eng.stats["forward_tokens"] > base - (SHARED // BS) * BS
    assert eng.stats["forward_tokens"] == base + eng.stats["recomputed_tokens"] - eng.stats["prefix_hit_tokens"]
    for r in reqs:
        assert out[r.rid] == reference(model, r), r.rid


def test_chunked_prefill(model):
    reqs = workload()
    eng = me.MiniEngine(model, num_blocks=96, block_size=BS, max_num_batched_tokens=6)
    out = eng.run(reqs)
    assert eng.stats["max_step_tokens"] <= 6 and eng.stats["mixed_steps"] > 0  # decode rows beside a chunk
    assert eng.stats["partial_prefill_rows"] > 0  # rows of a prompt chunk that did not reach its end
    for r in reqs:
        assert out[r.rid] == reference(model, r), r.rid


def test_seeded_sampling_and_mask(model):
    """Seeded rows reproduce generate(do_sample=True) after torch.manual_seed(seed), as in
    tests/test_framework_sampler.py; a masked greedy row equals generate with prefix_allowed_tokens_fn."""
    reqs = workload()[:4]  # r1..r3 seeded, r0 masked greedy
    params = [SamplingParams(temperature=0.7, top_k=8, seed=11), SamplingParams(temperature=1.3, top_p=0.8, seed=12),
              SamplingParams(temperature=1.0, top_k=20, top_p=0.9, seed=13)]
    for r, sp in zip(reqs[1:], params):
        r.params = sp
    even = torch.arange(V) % 2 == 0
    reqs[0].allowed = lambda output: even
    eng = me.MiniEngine(model, num_blocks=12, block_size=BS, max_num_batched_tokens=8)  # preempts, chunks
    out = eng.run(reqs)
    seeded = {r.rid for r in reqs[1:]}
    assert any(rid in seeded and k > 0 for rid, k in eng.preempted)  # a seeded stream crosses a preemption
    assert eng.stats["partial_prefill_rows"] > 0
    for r, sp in zip(reqs[1:], params):
        torch.manual_seed(sp.seed)
        p = torch.tensor([r.prompt])
        ref = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=r.max_tokens, do_sample=True,
                             temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p)
        assert out[r.rid] == ref[0, len(r.prompt):].tolist(), r.rid
    r = reqs[0]
    p = torch.tensor([r.prompt])
    ref = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=r.max_tokens, do_sample=False,
                         prefix_allowed_tokens_fn=lambda b, ids: even.nonzero().flatten().tolist())
    assert out[r.rid] == ref[0, len(r.prompt):].tolist() and all(t % 2 == 0 for t in out[r.rid])


def test_same_step_full_prefix_hit(model):
    """Two identical block-aligned prompts admitted in one step: the second hits the blocks the first
    registers when it is scheduled, capped at len - 1; its last token is recomputed reading the shared KV."""
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(1, V, (2 * BS,), generator=g).tolist()
    reqs = [me.Request("a", prompt, 4), me.Request("b", list(prompt), 4)]
    eng = me.MiniEngine(model, num_blocks=16, block_size=BS, max_num_batched_tokens=64)
    out = eng.run(reqs)
    assert eng.stats["prefix_hit_tokens"] == len(prompt) - 1
    assert eng.stats["forward_tokens"] == len(prompt) + 1 + 2 * (4 - 1)
    for r in reqs:
        assert out[r.rid] == reference(model, r), r.rid


def test_prefill_attention_matches_decode_kernel():
    """The gathered chunk attention and block_manager.paged_attention agree on every query position."""
    g = torch.Generator().manual_seed(2)
    k = torch.randn(6, BS, 2, 8, generator=g, dtype=torch.float64)
    v = torch.randn(6, BS, 2, 8, generator=g, dtype=torch.float64)
    table, ctx = [4, 1, 5], 11
    q = torch.randn(5, 4, 8, generator=g, dtype=torch.float64)  # positions 6..10
    got = me.paged_prefill_attention(q, k, v, table, ctx)
    for i in range(5):
        assert torch.allclose(got[i], me.paged_attention(q[i], k, v, table, ctx - 4 + i), atol=1e-12)


@pytest.mark.parametrize("blocks, budget", [(14, 64), (96, 6)])
def test_batched_attention_path(model, blocks, budget):
    """attention="batched" (one padded SDPA call per layer, the GPU experiment's second path) gives the same
    greedy tokens as generate() under preemption and under chunked prefill mixed with decode rows."""
    reqs = workload()
    eng = me.MiniEngine(model, num_blocks=blocks, block_size=BS, max_num_batched_tokens=budget, attention="batched")
    out = eng.run(reqs)
    assert eng.stats["preemptions"] > 0 if blocks == 14 else eng.stats["mixed_steps"] > 0
    for r in reqs:
        assert out[r.rid] == reference(model, r), r.rid


def test_plain_greedy_shortcut_is_what_sample_picks():
    """The step's shortcut (argmax of the raw logits when every row is plain greedy) picks what sample() picks,
    ties included: bf16 logits cast to float32 tie often, and both take the first maximal index."""
    from sampler import BatchState, sample

    g = torch.Generator().manual_seed(4)
    logits = (torch.randn(6, V, generator=g) * 4).to(torch.bfloat16)
    logits[0, [7, 50, 199]] = logits[0].max() + 1  # an exact three-way tie for the top
    logits[1, [3, 4]] = float("inf")
    prompts = [torch.randint(1, V, (5,), generator=g).tolist() for _ in range(6)]
    params = [SamplingParams(temperature=0.0, top_k=5, top_p=0.5, min_p=0.2, seed=s)
              for s in (None, 1, None, 2, 3, None)]
    assert all(me._plain_greedy(sp) for sp in params)
    st = BatchState(list(zip(prompts, params)), V)
    st.record(torch.tensor([7, 3, 9, 9, 0, 1]))  # output counts: neutral penalties must ignore them
    want, _ = sample(logits.float(), st)
    assert torch.equal(logits.float().argmax(-1), want)
    assert want[0] == 7 and want[1] == 3
    assert not me._plain_greedy(SamplingParams(temperature=0.0, repetition_penalty=1.1))
