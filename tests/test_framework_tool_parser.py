"""code/framework/tool_parser.py (docs/framework/engine-tools-reasoning.md): the streaming tool-call and
reasoning parsers give the one-shot parse for every way of cutting the output into deltas; a random-logit
model under the tools' grammar always produces calls that parse and validate with jsonschema (and never
without it); and with a reasoning parser the mask allows everything inside <think>...</think> and the
grammar is enforced from the token after </think>."""
from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "framework"))
import grammar as gr  # noqa: E402
import tool_parser as tp  # noqa: E402

TC = ("<tool_call>", "</tool_call>", "tool_call", tp.tool_call_event)

# One output, cut into the token strings a detokenizer would hand out: both tags arrive in pieces.
TOKENS = ["I'll check", "<", "tool", "_call", ">", '{"name": "get_weather", "arguments": ',
          '{"city": "Paris"}}', "</", "tool_call", ">", " then a<b", "<tool_call>",
          '{"name":"f","arguments":{}}', "</tool_call", ">"]


def all_groupings(tokens):
    """Every way of grouping consecutive tokens into deltas: 2^(n-1) of them."""
    n = len(tokens)
    for cuts in itertools.product([False, True], repeat=n - 1):
        deltas, cur = [], tokens[0]
        for cut, t in zip(cuts, tokens[1:]):
            if cut:
                deltas.append(cur)
                cur = t
            else:
                cur += t
        yield deltas + [cur]


def test_tool_parser_every_token_grouping():
    text = "".join(TOKENS)
    ref = tp.parse_once(text, *TC[:3], close=TC[3])
    assert [e[0] for e in ref] == ["content", "tool_call", "content", "tool_call"]
    assert ref[1][1] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert ref[2] == ("content", " then a<b")
    count = 0
    for deltas in all_groupings(TOKENS):
        parser = tp.hermes_parser()
        events = []
        for d in deltas:
            new = parser.feed(d)
            for kind, value in new:                   # nothing of a tag ever leaks into content
                assert kind != "content" or "<tool" not in value and "tool_call>" not in value
            events += new
        assert tp.normalize(events + parser.finish()) == ref
        count += 1
    assert count == 2 ** (len(TOKENS) - 1)


def char_splits(text):
    """Every split into two or three pieces at character boundaries, and one character per delta."""
    n = len(text)
    yield list(text)
    for i in range(1, n):
        yield [text[:i], text[i:]]
    for i, j in itertools.combinations(range(1, n), 2):
        yield [text[:i], text[i:j], text[j:]]


@pytest.mark.parametrize("text", [
    'ok <tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>',
    '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"y": [1, 2]}}',
    "<tool_call<tool_call>{bad json}</tool_call> trailing <tool_c",
])
def test_tool_parser_every_char_cut(text):
    ref = tp.parse_once(text, *TC[:3], close=TC[3])
    for deltas in char_splits(text):
        assert tp.stream(tp.hermes_parser(), deltas) == ref


@pytest.mark.parametrize("started", [False, True])
def test_reasoning_then_tools_every_char_cut(started):
    """Reasoning parser first; its content stream feeds the tool parser (vLLM parses tools from content only)."""
    body = 'compare 9.11 < 9.8</think>It is<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    text = body if started else "<think>" + body
    ref = tp.parse_once(text, "<think>", "</think>", inside=started)
    assert ref[0] == ("reasoning", "compare 9.11 < 9.8")
    for deltas in char_splits(text):
        think, tools = tp.think_parser(started), tp.hermes_parser()
        events = []
        for d in deltas + [None]:
            out = think.feed(d) if d is not None else think.finish()
            for kind, value in out:
                if kind == "content":
                    events += tools.feed(value)
                else:
                    events.append((kind, value))
        events += tools.finish()
        got = tp.normalize(events)
        assert [e for e in got if e[0] == "reasoning"] == ref[:1]
        assert got[1:] == tp.parse_once(ref[1][1], *TC[:3], close=TC[3])


INT = {"type": "integer", "minimum": -9, "maximum": 9}
TOOLS = [
    {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}},
    {"name": "set_thermostat", "parameters": {"type": "object", "properties": {
        "delta": INT, "eco": {"type": "boolean"}},
        "required": ["delta", "eco"], "additionalProperties": False}},
]
CALL_SCHEMA = {"oneOf": [{"type": "object", "properties": {"name": {"const": t["name"]}, "arguments": t["parameters"]},
                          "required": ["name", "arguments"], "additionalProperties": False} for t in TOOLS]}
EXTRA = ['{"', '":', '","', '"}', '{"name":"', '","arguments":{"', "true", "false", "Paris", "celsius", "weather"]
SPECIALS = ["<eos>", "<think>", "</think>"]


@pytest.fixture(scope="module")
def vocab():
    words, toks = tp.char_vocab(EXTRA, SPECIALS)
    eos, t0, t1 = (words.index(s) for s in SPECIALS)
    return dict(words=words, toks=toks, eos=eos, think=(t0, t1))


def random_logits(n, eos, bias=None):
    def fn(ids, rng):
        z = rng.normal(0.0, 2.0, size=n)
        z[eos] = -30.0                                # the model rarely stops on its own
        for t, b in (bias or {}).items():
            z[t] += b
        return z
    return fn


def decode(words, ids):
    return "".join(words[i] for i in ids)


def test_required_tool_call_always_valid(vocab):
    words, eos = vocab["words"], vocab["eos"]
    a = tp.tools_automaton(TOOLS)
    index = gr.token_index(a, vocab["toks"], eos)
    validator = jsonschema.Draft202012Validator(CALL_SCHEMA)
    rng = np.random.default_rng(0)
    names = set()
    for _ in range(60):
        out, _ = tp.generate(random_logits(len(words), eos), index, eos, [], rng)
        assert out[-1] == eos
        call = json.loads(decode(words, out[:-1]))
        validator.validate(call)
        names.add(call["name"])
    assert names == {"get_weather", "set_thermostat"}
    bad = 0                                           # the same model without the mask
    for _ in range(60):
        out, _ = tp.generate(random_logits(len(words), eos), index, eos, [], rng, constrain=False, max_new=60)
        try:
            validator.validate(json.loads(decode(words, [t for t in out if t != eos])))
        except (json.JSONDecodeError, jsonschema.ValidationError):
            bad += 1
    assert bad == 60


def test_named_tool_is_its_parameter_schema(vocab):
    words, eos = vocab["words"], vocab["eos"]
    params = TOOLS[1]["parameters"]
    index = gr.token_index(gr.compile_schema(params), vocab["toks"], eos)
    rng = np.random.default_rng(1)
    for _ in range(30):
        out, _ = tp.generate(random_logits(len(words), eos), index, eos, [], rng)
        jsonschema.validate(json.loads(decode(words, out[:-1])), params)


def test_reasoning_gate(vocab):
    words, eos, (t0, t1) = vocab["words"], vocab["eos"], vocab["think"]
    index = gr.token_index(tp.tools_automaton(TOOLS), vocab["toks"], eos)
    V = index.shape[1]
    assert index[0, t0] == gr.DEAD and index[0, t1] == gr.DEAD   # ungated, the model could not think at all
    validator = jsonschema.Draft202012Validator(CALL_SCHEMA)
    rng = np.random.default_rng(2)
    model = random_logits(len(words), eos, {t1: 2.0})
    lengths = []
    for _ in range(40):
        out, trace = tp.generate(model, index, eos, [t0], rng, think=(t0, t1))
        end = out.index(t1)
        assert all(not ended and allowed == V for ended, allowed in trace[:end + 1])   # free while thinking
        assert all(ended and allowed < V for ended, allowed in trace[end + 1:])        # grammar after it
        assert trace[end + 1][1] == int((index[0] != gr.DEAD).sum())                   # starts at state 0
        text = decode(words, out[:-1])
        events = tp.parse_once(text, "<think>", "</think>", inside=True)
        assert events[-1][0] == "content"
        validator.validate(json.loads(events[-1][1]))
        lengths.append(end)
    assert max(lengths) > 0
    # a template that closed the span in the prompt (thinking disabled): the grammar applies from step 0
    out, trace = tp.generate(model, index, eos, [t0, t1], rng, think=(t0, t1))
    assert all(ended and allowed < V for ended, allowed in trace)
    validator.validate(json.loads(decode(words, out[:-1])))
    assert tp.is_reasoning_end([t0, t1, t0], t0, t1) is False
