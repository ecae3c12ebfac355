"""code/framework/grammar.py (docs/framework/structured-outputs.md): the schema compiles to an automaton
that accepts exactly the compact documents of the schema; the vectorised token index equals walking each
token's bytes; every sampled output of a random-weight model parses and validates with jsonschema; and
jump-forward decoding gives the same tokens with fewer forward passes."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
import grammar as gr  # noqa: E402

INT = {"type": "integer", "minimum": -99, "maximum": 99}
SCHEMA = {"type": "object", "properties": {
    "kind": {"type": "string", "enum": ["cat", "dog", "cow"]},
    "n": INT,
    "ok": {"type": "boolean"},
    "at": {"type": "object", "properties": {"x": INT, "tag": {"type": "string", "enum": ["a", "ab"]}},
           "required": ["x", "tag"], "additionalProperties": False}},
    "required": ["kind", "n", "ok", "at"], "additionalProperties": False}


@pytest.fixture(scope="module")
def setup():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rng = random.Random(0)
    docs = [gr.dump(gr.random_instance(SCHEMA, rng)) for _ in range(1500)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|eos|>"], show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    a = gr.compile_schema(SCHEMA)
    eos = tok.token_to_id("<|eos|>")
    toks = gr.token_bytes(tok, {"<|eos|>"})
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=96, n_embd=32, n_layer=2,
                                       n_head=4, bos_token_id=None, eos_token_id=None)).eval().double()
    yield dict(tok=tok, a=a, eos=eos, toks=toks, docs=docs, model=model, index=gr.token_index(a, toks, eos))
    torch.set_num_threads(threads)


def test_automaton_accepts_exactly_the_schema(setup):
    a, rng = setup["a"], random.Random(1)
    for d in setup["docs"][:300]:
        assert a.walk(0, d) == a.accept
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for d in setup["docs"][:300]:                       # single-character edits: accepted iff still valid
        i = rng.randrange(len(d))
        bad = d[:i] + rng.choice('{}":,-0123456789abcdefghijklmnopqrstuvwxyz') + d[i + 1:]
        try:
            ok = validator.is_valid(json.loads(bad)) and gr.dump(json.loads(bad)) == bad
        except json.JSONDecodeError:
            ok = False
        assert (a.walk(0, bad) == a.accept) == ok, bad
    with pytest.raises(ValueError):
        gr.compile_schema({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
                           "additionalProperties": False})


def test_index_equals_walking_each_token(setup):
    a, toks, eos, index = setup["a"], setup["toks"], setup["eos"], setup["index"]
    for s in range(len(a.trans)):
        assert np.array_equal(gr.token_index_naive(a, toks, eos, s), index[s])
    assert (index != gr.DEAD).sum(1).min() >= 1          # no state is a dead end


def test_sampled_outputs_parse_and_validate(setup):
    tok, eos = setup["tok"], setup["eos"]
    seqs = gr.constrained_batch(setup["model"], setup["index"], eos, [eos], list(range(48)), 80)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for s in seqs:
        assert s[-1] == eos
        validator.validate(json.loads(tok.decode(s[:-1])))


def test_jump_forward_same_tokens_fewer_forwards(setup):
    tok, a, eos, index = setup["tok"], setup["a"], setup["eos"], setup["index"]
    forced = gr.forced_strings(a)
    assert forced[0] == ('{"kind":"', forced[0][1])
    enc = lambda s: tok.encode(s).ids  # noqa: E731
    for seed in range(4):
        base, f_base, _ = gr.generate_one(setup["model"], a, index, forced, enc, eos, [eos], seed, jump=False)
        jump, f_jump, _ = gr.generate_one(setup["model"], a, index, forced, enc, eos, [eos], seed, jump=True)
        assert jump == base and f_jump < f_base
        jsonschema.validate(json.loads(tok.decode(jump[:-1])), SCHEMA)
