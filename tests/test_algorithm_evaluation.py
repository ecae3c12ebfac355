"""code/algorithm/evaluation.py (docs/algorithm/evaluation.md, notebooks/algorithm/evaluation-lab.ipynb):
the multiple-choice scorer against token-by-token forward passes and transformers' own loss, the
normalisation flip on a hand-built bigram model, CORE centring on hand-checked numbers, pass@k
against enumeration of subsets, the judge's position bias and its swap correction, n-gram
contamination, the classifier's trainable-parameter formula and causal read-out, SFT masks and the
engine's forced tokens."""
from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from algorithm_helpers import load_listing

ev = load_listing("algorithm_evaluation", "evaluation.py")


@pytest.fixture(scope="module")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=50, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    model.loss_type = "ForCausalLM"      # silences transformers' "loss_type=None" notice on forward(labels=...)
    return model


def test_scorer_matches_incremental_forward_and_transformers_loss(gpt2):
    ctx, cont = [3, 1, 4, 1, 5], [9, 2, 6, 5]
    lp = ev.continuation_logprobs(lambda x: gpt2(x).logits, ctx, cont)
    with torch.no_grad():
        step = [gpt2(torch.tensor([ctx + cont[:j]])).logits[0, -1].log_softmax(-1)[t].item()
                for j, t in enumerate(cont)]
        hf = gpt2(torch.tensor([ctx + cont]), labels=torch.tensor([[-100] * len(ctx) + cont])).loss.item()
    assert torch.allclose(lp, torch.tensor(step), atol=1e-5)
    assert abs(-lp.mean().item() - hf) < 1e-5


def test_normalisation_flips_the_pick():
    # Token 0 is the context. Choice A = [1, 2]: two unlikely tokens. Choice B = [3, 3, 3, 3, 3, 3]:
    # six likely tokens. Sum prefers A (fewer tokens to pay for), per token prefers B.
    V = 5
    table = torch.full((V, V), -30.0)
    table[0, 1], table[0, 3] = 0.0, math.log(3.0)          # p(1|0) = 1/4, p(3|0) = 3/4
    table[1, 2] = 0.0                                       # p(2|1) = 1
    table[3, 3] = math.log(3.0)                             # p(3|3) = 3/4
    table[3, 0] = 0.0
    lm = ev.BigramLM(table)
    s = ev.choice_scores(lm, [0], [[1, 2], [3] * 6], choice_texts=["ab", "cccccc"])
    assert s["sum"][0] == pytest.approx(math.log(1 / 4), abs=1e-5)
    assert s["sum"][1] == pytest.approx(6 * math.log(3 / 4), abs=1e-5)
    assert ev.pick(s["sum"]) == 0 and ev.pick(s["per_token"]) == 1 and ev.pick(s["per_char"]) == 1
    assert ev.lm_task_correct(lm, [0], [3, 3]) and not ev.lm_task_correct(lm, [0], [1, 2])


def test_core_centring_hand_numbers():
    assert ev.centred(0.55, 0.25) == pytest.approx(0.4)
    assert ev.centred(0.25, 0.25) == 0.0
    assert ev.centred(0.20, 0.25) == pytest.approx(-1 / 15)
    assert ev.centred(0.75, 0.50) == pytest.approx(0.5)
    assert ev.centred(0.323, 0.0) == pytest.approx(0.323)
    per_task, core = ev.core_metric({"a": (0.55, 0.25), "b": (0.75, 0.5), "c": (0.2, 0.25)})
    assert core == pytest.approx((0.4 + 0.5 - 1 / 15) / 3)
    # nanochat's baseline in percent gives the same number
    assert (0.55 - 0.01 * 25) / (1 - 0.01 * 25) == pytest.approx(per_task["a"])


def test_chat_scoring():
    logits = torch.full((300,), -5.0)
    logits[ord("T")] = 9.0                                  # the model would rather say "The ..."
    logits[ord("C")] = 2.0
    assert ev.categorical_pick(logits, [ord(c) for c in "ABCD"]) == "C"
    assert ev.extract_gsm8k("so 1,234 in total\n#### 1,234") == "1234"
    assert ev.extract_gsm8k("#### -5") == "-5"
    assert ev.extract_gsm8k("The answer is 72") is None
    assert ev.extract_gsm8k("#### 72.0") != ev.extract_gsm8k("#### 72")


def test_pass_at_k_equals_enumeration_and_is_unbiased():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert ev.pass_at_k(n, c, k) == pytest.approx(ev.pass_at_k_bruteforce(n, c, k), abs=1e-12)
    for n, p, k in ((10, 0.1, 5), (20, 0.3, 3), (15, 0.05, 10)):
        assert ev.unbiased_expectation(n, p, k) == pytest.approx(1 - (1 - p) ** k, abs=1e-12)
    assert 1 - (1 - 1 / 10) ** 5 < ev.pass_at_k(10, 1, 5)       # plug-in estimate is lower here


def test_execution_grading():
    test = "def check(f):\n    assert f(2, 3) == 5\n    assert f(-1, 1) == 0\n"
    assert ev.run_candidate("def add(a, b):\n    return a + b\n", test, "add")
    assert not ev.run_candidate("def add(a, b):\n    return a * b\n", test, "add")
    assert not ev.run_candidate("def add(a, b):\n    while True:\n        pass\n", test, "add", timeout=0.5)


def test_judge_position_bias_and_swap():
    b = 1.0
    assert ev.judge_first_wins_prob(0.0, 0.0, b) == pytest.approx(1 / (1 + math.exp(-b)))
    for qa, qb in ((0.0, 0.0), (1.0, 0.5), (-2.0, 0.3)):
        sa, sb = ev.swap_average(qa, qb, b), ev.swap_average(qb, qa, b)
        assert sa + sb == pytest.approx(1.0)
        if qa == qb:
            assert sa == pytest.approx(0.5)
        else:
            assert (sa > 0.5) == (qa > qb)
    rng = random.Random(0)
    pairs = [(0, 1)] * 4000                                 # two answers of equal quality
    single = ev.judge_pairs([0.0, 0.0], pairs, b, rng)
    swapped = ev.judge_pairs([0.0, 0.0], pairs, b, rng, swap=True)
    assert sum(v == 1 for v in single) / len(pairs) > 0.68
    assert abs(sum(swapped) / len(pairs)) < 0.04
    assert ev.single_grade(7.0, rng, noise=0.0) == 7


def test_contamination_catches_planted_item():
    rng = random.Random(0)
    docs = [ev.synthetic_text(rng, 12) for _ in range(200)]
    items = [ev.synthetic_text(rng, 2) for _ in range(60)]
    docs[17] += " " + items[0]
    idx13 = ev.build_index(docs, 13)
    assert ev.is_contaminated(items[0], idx13, 13)
    assert sum(ev.is_contaminated(it, idx13, 13) for it in items[1:]) == 0
    idx4 = ev.build_index(docs, 4)
    assert sum(ev.is_contaminated(it, idx4, 4) for it in items[1:]) > 50   # short n: everything looks dirty


def test_classifier_params_and_causal_readout(gpt2):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    d = 32
    m = ev.to_classifier(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=d, n_layer=3, n_head=4,
                                                    bos_token_id=0, eos_token_id=0)), 2)
    assert sum(p.numel() for p in m.parameters() if p.requires_grad) == ev.trainable_params_formula(d, 2)
    assert sum(p.numel() for p in m.transformer.h[0].parameters()) == ev.gpt2_block_params(d)
    m.eval()
    x = torch.randint(0, 50, (4, 10))
    y = x.clone()
    y[:, 1:] = torch.randint(0, 50, (4, 9))
    with torch.no_grad():
        assert torch.allclose(ev.class_logits(m, x, 0), ev.class_logits(m, y, 0), atol=1e-6)
        assert not torch.allclose(ev.class_logits(m, x, -1), ev.class_logits(m, y, -1), atol=1e-3)


def _gsm_conv():
    return [{"role": "user", "content": "12 boxes of 7?"},
            {"role": "assistant", "content": [{"type": "text", "text": "That is "},
                                              {"type": "python", "text": "12*7"},
                                              {"type": "python_output", "text": "84"},
                                              {"type": "text", "text": " cups.\n#### 84"}]}]


def test_sft_mask_and_loss(gpt2):
    tok = ev.CharTokenizer()
    ids, mask = ev.render_conversation(_gsm_conv(), tok)
    sp = tok.special
    supervised = [t for t, m in zip(ids, mask) if m]
    assert tok.decode(supervised) == "That is <|python_start|>12*7<|python_end|> cups.\n#### 84<|assistant_end|>"
    x, y = ev.masked_targets(ids, mask)
    assert (y != -1).sum().item() == sum(mask[1:])
    assert sp["<|output_start|>"] in ids and sp["<|output_start|>"] not in y.tolist()
    logits = torch.randn(len(x), tok.vocab_size, generator=torch.Generator().manual_seed(0))
    loss = F.cross_entropy(logits, y, ignore_index=-1)
    keep = y != -1
    manual = -logits.log_softmax(-1)[keep.nonzero().squeeze(1), y[keep]].mean()
    assert loss.item() == pytest.approx(manual.item(), abs=1e-6)
    rows = ev.task_mixture([("chat", 5), ("mmlu", 3), ("mmlu", 3), ("gsm8k", 2)])
    assert sum(n == "mmlu" for n, _ in rows) == 6 and len(rows) == 13


def test_engine_forces_tool_output():
    tok = ev.CharTokenizer()
    sp = tok.special
    prompt = [sp["<|bos|>"], sp["<|user_start|>"]] + tok.encode("12 boxes of 7?") + [sp["<|user_end|>"],
                                                                                    sp["<|assistant_start|>"]]
    script = tok.encode("That is ") + [sp["<|python_start|>"]] + tok.encode("12*7") + [sp["<|python_end|>"]] \
        + tok.encode(" cups.\n#### 84") + [sp["<|assistant_end|>"]]
    out, masks = ev.generate_with_tools(ev.scripted_policy(script, len(prompt), tok), prompt, tok)
    forced = [t for t, m in zip(out, masks) if m == 0]
    assert forced == [sp["<|output_start|>"]] + tok.encode("84") + [sp["<|output_end|>"]]
    ids, _ = ev.render_conversation(_gsm_conv(), tok)
    assert prompt + out == ids                               # inference reproduces the SFT rendering
    assert ev.use_calculator("9**9**9") is None and ev.use_calculator("__import__('os')") is None
    assert ev.use_calculator("1,000/8") == 125.0
