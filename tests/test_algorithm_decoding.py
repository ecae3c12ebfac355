"""code/algorithm/decoding.py against transformers (docs/algorithm/decoding.md,
notebooks/algorithm/decoding-lab.ipynb): every logits processor against its transformers class on
random logits, and greedy, sampling (n > 1 included) and beam search against `model.generate` on
random-weight models built from configs, token for token, with the same seeds."""
from __future__ import annotations

import pytest
import torch

from algorithm_helpers import load_listing

dec = load_listing("algorithm_decoding", "decoding.py")

V = 40


@pytest.fixture(scope="module")
def models():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                      initializer_range=0.3)).eval()
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         initializer_range=0.3)).eval()
    # The configs bring default EOS ids (Llama: 2) that generate() would stop on even when a test passes
    # none; dec.generate knows only the EOS it is given, so the comparison must not have a hidden one.
    for m in (gpt2, llama):
        m.generation_config.eos_token_id = None
    return {"gpt2": gpt2, "llama": llama}


def _hf(model, prompt, **kw):
    return model.generate(prompt, attention_mask=torch.ones_like(prompt), **kw)


PROMPT = torch.tensor([[3, 14, 15, 9, 2, 6]])


def test_processors_equal_transformers_classes():
    from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                        TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    g = torch.Generator().manual_seed(0)
    for scale in (0.5, 3.0, 10.0):
        logits = torch.randn(64, V, generator=g) * scale
        ids = torch.randint(0, V, (64, 9), generator=g)
        assert torch.equal(dec.temperature(logits, 0.6), TemperatureLogitsWarper(0.6)(ids, logits))
        for k in (1, 5, V + 3):
            assert torch.equal(dec.top_k(logits, k), TopKLogitsWarper(k)(ids, logits))
        for p, keep in ((0.5, 1), (0.9, 1), (0.95, 3), (1e-9, 1)):
            assert torch.equal(dec.top_p(logits, p, keep), TopPLogitsWarper(p, min_tokens_to_keep=keep)(ids, logits))
        for p, keep in ((0.05, 1), (0.3, 2), (1.0, 1)):
            assert torch.equal(dec.min_p(logits, p, keep), MinPLogitsWarper(p, min_tokens_to_keep=keep)(ids, logits))
        for theta in (1.3, 0.7):
            assert torch.equal(dec.repetition_penalty(logits, ids, theta),
                               RepetitionPenaltyLogitsProcessor(theta)(ids, logits))


def test_top_k_keeps_ties():
    scores = torch.tensor([[1.0, 3.0, 2.0, 2.0, 0.0]])
    assert torch.isfinite(dec.top_k(scores, 2)).tolist() == [[False, True, True, True, False]]


def test_presence_frequency_is_openais_formula():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, V, generator=g)
    generated = torch.randint(0, 6, (3, 11), generator=g)
    out = dec.presence_frequency(logits, generated, presence=0.4, frequency=0.25)
    for row in range(3):
        hist = generated[row].tolist()
        for j in range(V):
            c = hist.count(j)
            assert abs(out[row, j].item() - (logits[row, j].item() - 0.25 * c - 0.4 * (c > 0))) < 1e-6
    assert torch.equal(dec.presence_frequency(logits, generated[:, :0], 1.0, 1.0), logits)


def test_repetition_penalty_pushes_both_signs_down():
    scores = torch.tensor([[2.0, -2.0, 1.0]])
    out = dec.repetition_penalty(scores, torch.tensor([[0, 1]]), 2.0)
    assert out.tolist() == [[1.0, -4.0, 1.0]]


def test_exponential_race_is_multinomial():
    probs = torch.rand(V).softmax(-1).expand(5000, -1)
    a = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(3)).squeeze(1)
    b = dec.sample_exponential_race(probs, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_greedy_equals_generate(models, arch):
    model = models[arch]
    for eos in (None, 7):
        kw = dict(eos_token_id=eos, pad_token_id=0) if eos is not None else dict(pad_token_id=0)
        ours = dec.generate(model, PROMPT, 20, eos_token_id=eos, pad_token_id=0)
        assert torch.equal(ours, _hf(model, PROMPT, max_new_tokens=20, do_sample=False, **kw))


SAMPLING = [dict(), dict(temp=0.6), dict(k=4), dict(p=0.7), dict(minp=0.2), dict(temp=1.4, k=12, p=0.85),
            dict(rep_penalty=1.4), dict(temp=0.9, minp=0.1, rep_penalty=1.2)]
HF_NAME = {"temp": "temperature", "k": "top_k", "p": "top_p", "minp": "min_p", "rep_penalty": "repetition_penalty"}


@pytest.mark.parametrize("arch,knobs", [("llama", k) for k in SAMPLING] + [("gpt2", k) for k in SAMPLING[4:6]],
                         ids=str)
def test_sampling_equals_generate(models, arch, knobs):
    model = models[arch]
    hf_kw = {HF_NAME[k]: v for k, v in knobs.items()}
    hf_kw.setdefault("top_k", 0)
    for seed in ((0, 1) if not knobs else (2,)):
        torch.manual_seed(seed)
        out = _hf(model, PROMPT, max_new_tokens=15, do_sample=True, num_return_sequences=3, eos_token_id=5,
                  pad_token_id=0, output_scores=True, return_dict_in_generate=True, **hf_kw)
        torch.manual_seed(seed)
        ours, history = dec.generate(model, PROMPT, 15, do_sample=True, n=3, eos_token_id=5, pad_token_id=0,
                                     return_scores=True, **knobs)
        assert torch.equal(out.sequences, ours)
        assert all(torch.equal(a, b) for a, b in zip(out.scores, history)) and len(out.scores) == len(history)


def test_presence_frequency_inside_generate(models):
    from transformers import LogitsProcessor

    class PresenceFrequency(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return dec.presence_frequency(scores, input_ids[:, PROMPT.shape[1]:], 0.7, 0.4)

    model = models["llama"]
    torch.manual_seed(5)
    theirs = _hf(model, PROMPT, max_new_tokens=25, do_sample=True, top_k=0, temperature=0.8, pad_token_id=0,
                 repetition_penalty=1.1, logits_processor=[PresenceFrequency()])
    torch.manual_seed(5)
    ours = dec.generate(model, PROMPT, 25, do_sample=True, temp=0.8, rep_penalty=1.1, presence=0.7, frequency=0.4)
    assert torch.equal(theirs, ours)


def _eos_on_greedy_path(model, step=3):
    """A token the greedy continuation emits a few steps in: beams then finish on EOS, not only at the limit."""
    return int(dec.generate(model, PROMPT, step + 1)[0, PROMPT.shape[1] + step])


BEAM_CASES = [("llama", 0.0, False), ("llama", 1.0, False), ("llama", 1.0, "never"), ("llama", 2.5, "never"),
              ("llama", -1.0, True), ("gpt2", 0.0, "never"), ("gpt2", 1.0, True)]


@pytest.mark.parametrize("arch,alpha,early", BEAM_CASES, ids=str)
def test_beam_search_equals_generate(models, arch, alpha, early):
    model = models[arch]
    finished_by_eos = 0
    for eos in (_eos_on_greedy_path(model), _eos_on_greedy_path(model, 6)):
        out = _hf(model, PROMPT, max_new_tokens=14, num_beams=3, num_return_sequences=3, length_penalty=alpha,
                  early_stopping=early, eos_token_id=eos, pad_token_id=eos, output_scores=True,
                  return_dict_in_generate=True)
        ours = dec.beam_search(model, PROMPT, 3, 14, eos, length_penalty=alpha, early_stopping=early)
        assert len(ours) == 3
        for row, (score, seq) in enumerate(ours):
            assert torch.equal(out.sequences[row][:len(seq)], seq)
            assert (out.sequences[row][len(seq):] == eos).all()
            assert torch.allclose(out.sequences_scores[row], score, rtol=1e-6, atol=0)
            finished_by_eos += int(seq[-1] == eos and len(seq) < PROMPT.shape[1] + 14)
    if alpha <= 1.0:                  # these cases exercise EOS, not only the length limit (alpha > 1 favours it)
        assert finished_by_eos > 0


def test_length_penalty_changes_the_winner(models):
    """With a short and a long finished hypothesis, alpha decides: sum_logp / L ** alpha."""
    model = models["llama"]
    winners = {}
    for eos in range(V):
        for alpha in (0.0, 3.0):
            best = dec.beam_search(model, PROMPT, 4, 14, eos, length_penalty=alpha)[0][1]
            winners[eos, alpha] = best
        if not torch.equal(winners[eos, 0.0], winners[eos, 3.0]):
            assert len(winners[eos, 0.0]) < len(winners[eos, 3.0])
            return
    pytest.fail("no EOS choice where the length penalty changes the beam-search winner")
