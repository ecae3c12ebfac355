"""code/framework/sampler.py (docs/framework/engine-sampling.md): one batch of requests with different
sampling parameters and seeds gives every request exactly the tokens, and the processed scores, that
transformers' generate() gives it alone with the same seed; n answers share one prefill."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
sys.path.insert(0, str(ROOT / "code" / "algorithm"))
import decoding as dec  # noqa: E402
import sampler as sm  # noqa: E402

V, T = 48, 10
SP = sm.SamplingParams
REQUESTS = [
    ([3, 14, 15, 9, 2, 6], SP(temperature=0.7, top_k=8, seed=11)),
    ([5, 7], SP(temperature=1.3, top_p=0.8, min_p=0.05, seed=12, n=3)),
    ([1, 2, 3, 4], SP(temperature=0.0, repetition_penalty=1.4)),
    ([9, 9, 8], SP(temperature=1.0, top_k=20, top_p=0.9, repetition_penalty=1.2, presence_penalty=0.5,
                   frequency_penalty=0.3, seed=13, n=2)),
]


@pytest.fixture(scope="module")
def model():
    from transformers import GPT2Config, GPT2LMHeadModel

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                   initializer_range=0.3, bos_token_id=None, eos_token_id=None)).eval().double()
    m.generation_config.eos_token_id = None
    yield m
    torch.set_num_threads(threads)


def hf_alone(model, prompt, sp):
    from transformers import LogitsProcessor, LogitsProcessorList

    class PresenceFrequency(LogitsProcessor):
        def __call__(self, ids, scores):
            return dec.presence_frequency(scores, ids[:, len(prompt):], sp.presence_penalty, sp.frequency_penalty)

    kw = dict(max_new_tokens=T, num_return_sequences=sp.n, pad_token_id=0, output_scores=True,
              return_dict_in_generate=True, do_sample=sp.temperature >= sm.EPS)
    if kw["do_sample"]:
        kw.update(temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p, min_p=sp.min_p or None)
    if sp.repetition_penalty != 1.0:
        kw["repetition_penalty"] = sp.repetition_penalty
    if sp.presence_penalty or sp.frequency_penalty:
        kw["logits_processor"] = LogitsProcessorList([PresenceFrequency()])
    if sp.seed is not None:
        torch.manual_seed(sp.seed)
    p = torch.tensor([prompt])
    return model.generate(p, attention_mask=torch.ones_like(p), **kw)


def test_batch_equals_each_request_alone(model):
    got, history, computed = sm.generate_batch(model, REQUESTS, T)
    start = 0
    for (prompt, sp), tokens in zip(REQUESTS, got):
        ref = hf_alone(model, prompt, sp)
        assert tokens == ref.sequences[:, len(prompt):].tolist()
        for t in range(T):                      # the processed scores, bit for bit
            assert torch.equal(history[t][start:start + sp.n], ref.scores[t])
        start += sp.n
    rows = sum(sp.n for _, sp in REQUESTS)
    lens = [len(p) for p, _ in REQUESTS]
    assert computed["prefill_real"] == sum(lens) and computed["decode"] == rows * (T - 1)
    assert sm.forward_tokens(lens, [sp.n for _, sp in REQUESTS], T, True) == sum(lens) + rows * (T - 1)


def test_sort_once_equals_separate_processors():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, V, generator=g) * 3
    params = [SP(top_k=k, top_p=p) for k, p in ((5, 1.0), (0, 0.7), (10, 0.9), (1, 0.5), (V + 5, 0.95), (0, 1.0))]
    st = sm.BatchState([([0], sp) for sp in params], V)
    fused = sm.top_k_top_p(logits, st)
    for i, sp in enumerate(params):
        ref = logits[i:i + 1]
        if 0 < sp.top_k:
            ref = dec.top_k(ref, sp.top_k)
        if sp.top_p < 1:
            ref = dec.top_p(ref, sp.top_p)
        assert torch.equal(torch.isfinite(fused[i:i + 1]), torch.isfinite(ref))


def test_neutral_rows_unchanged_and_seeds_isolated():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, V, generator=g)
    st = sm.BatchState([([1, 2], SP(seed=5)), ([3], SP(repetition_penalty=1.5, seed=6)), ([4], SP(seed=7))], V)
    pen = sm.apply_penalties(logits, st)
    assert torch.equal(pen[0], logits[0]) and torch.equal(pen[2], logits[2]) and not torch.equal(pen[1], logits[1])
    # a request's tokens depend on its own generator only: change the neighbours' seeds, row 0 is unchanged
    st2 = sm.BatchState([([1, 2], SP(seed=5)), ([3], SP(repetition_penalty=1.5, seed=60)), ([4], SP(seed=70))], V)
    a = [int(sm.sample(logits, st)[0][0]) for _ in range(8)]       # 8 draws: the generators advance
    b = [int(sm.sample(logits, st2)[0][0]) for _ in range(8)]
    c = [int(sm.sample(logits, st2)[0][2]) for _ in range(8)]
    assert a == b and len(set(a)) > 1 and c != a


def test_cache_indirection_equals_copying():
    g = torch.Generator().manual_seed(2)
    steps, beams = 7, 4
    parents = torch.randint(0, beams, (steps, beams), generator=g)
    parents[0] = torch.arange(beams)
    kv = torch.randn(steps, beams, generator=g)      # kv[t, slot]: what slot wrote at step t
    copied = kv[:1].clone()                           # the copying engine: reorder the whole history
    for t in range(1, steps):
        copied = torch.cat([copied[:, parents[t]], kv[t:t + 1]], dim=0)
    ind = sm.cache_indirection(parents)
    assert torch.equal(kv.gather(1, ind), copied)
    step = torch.arange(beams)[None]                  # the per-step update: ind'[:t, j] = ind[:t, parent[j]]
    for t in range(1, steps):
        step = torch.cat([step[:, parents[t]], torch.arange(beams)[None]], dim=0)
    assert torch.equal(step, ind)
