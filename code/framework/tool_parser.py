"""Tool calls and reasoning outputs as an engine handles them (docs/framework/engine-tools-reasoning.md).

Three pieces:
- TagStream: an incremental parser over a stream of text deltas. Text outside a pair of tags is content;
  text inside is either streamed as another kind (<think>...</think> -> reasoning) or held until the closing
  tag and then converted (<tool_call>{json}</tool_call> -> a tool call). A suffix of the buffer that could
  still become a tag is held back, so a tag split across deltas is never leaked as text.
- tools_automaton: the grammar of "one call to one of these tools" (tool_choice="required") built from the
  tools' parameter schemas with the automaton of grammar.py; a named tool is grammar.compile_schema of its
  parameters alone.
- generate: sampling from a random-logit "model" under a token mask, with vLLM's reasoning gate: while the
  model is thinking the mask allows everything and the grammar does not advance; the grammar starts at the
  first token after the reasoning end token.
"""
from __future__ import annotations

import json

import numpy as np

import grammar as gr


# --8<-- [start:stream]
def held_back(buf: str, tag: str) -> int:
    """Length of the longest suffix of buf that is a proper prefix of tag: text that may still turn into
    the tag with the next delta, so it must not be emitted yet."""
    for k in range(min(len(buf), len(tag) - 1), 0, -1):
        if tag.startswith(buf[-k:]):
            return k
    return 0


class TagStream:
    """feed(delta) -> events, finish() -> events; an event is (kind, value). Outside the tags the kind is
    "content". Inside, with close=None, text streams as `inside_kind`; with close given, the body is held
    (partial JSON is useless to a client that must parse it) and close(body) gives one event at the end tag.
    inside=True starts inside the tags (a template that already wrote <think> into the prompt)."""

    def __init__(self, start: str, end: str, inside_kind: str = "reasoning", close=None, inside: bool = False):
        self.start, self.end, self.kind, self.close = start, end, inside_kind, close
        self.inside, self.buf, self.body = inside, "", ""

    def _emit(self, out: list, text: str) -> None:
        if not text:
            return
        if self.inside and self.close:
            self.body += text                        # held: nothing leaves until the end tag
        else:
            out.append((self.kind if self.inside else "content", text))

    def feed(self, delta: str) -> list:
        self.buf += delta
        out: list = []
        while True:
            tag = self.end if self.inside else self.start
            i = self.buf.find(tag)
            if i < 0:                                # no whole tag: emit all but a possible tag prefix
                k = held_back(self.buf, tag)
                self._emit(out, self.buf[:len(self.buf) - k])
                self.buf = self.buf[len(self.buf) - k:]
                return out
            self._emit(out, self.buf[:i])
            self.buf = self.buf[i + len(tag):]
            if self.inside and self.close:
                out.append(self.close(self.body))
                self.body = ""
            self.inside = not self.inside

    def finish(self) -> list:
        """End of generation: a held tag prefix was text after all; an unclosed tool call is parsed as is
        (vLLM's regex also accepts '<tool_call>' up to the end of the output)."""
        out: list = []
        self._emit(out, self.buf)
        self.buf = ""
        if self.inside and self.close:
            out.append(self.close(self.body))
            self.body = ""
        return out


def tool_call_event(body: str):
    """Hermes body -> ("tool_call", {"name", "arguments"}); arguments stay a JSON string, as in the OpenAI
    API. Anything that does not parse is reported, not dropped."""
    try:
        obj = json.loads(body)
        return ("tool_call", {"name": obj["name"], "arguments": json.dumps(obj["arguments"])})
    except (json.JSONDecodeError, KeyError, TypeError):
        return ("invalid_tool_call", body)


def hermes_parser() -> TagStream:
    return TagStream("<tool_call>", "</tool_call>", "tool_call", close=tool_call_event)


def think_parser(started: bool = False) -> TagStream:
    return TagStream("<think>", "</think>", "reasoning", inside=started)
# --8<-- [end:stream]


def normalize(events: list) -> list:
    """Merge adjacent text events of one kind and drop empty text: the streaming and the one-shot parse
    may cut the same text into different pieces."""
    out: list = []
    for kind, value in events:
        if isinstance(value, str) and kind in ("content", "reasoning"):
            if not value:
                continue
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + value)
                continue
        out.append((kind, value))
    return out


def parse_once(text: str, start: str, end: str, inside_kind: str = "reasoning", close=None,
               inside: bool = False) -> list:
    """The non-streaming parse of a whole output (the reference for the streaming one)."""
    if inside:
        text = start + text
    events, pos = [], 0
    while True:
        i = text.find(start, pos)
        if i < 0:
            events.append(("content", text[pos:]))
            break
        events.append(("content", text[pos:i]))
        j = text.find(end, i + len(start))
        body = text[i + len(start):j if j >= 0 else len(text)]
        events.append(close(body) if close else (inside_kind, body))
        if j < 0:
            break
        pos = j + len(end)
    return normalize(events)


def stream(parser: TagStream, deltas: list[str]) -> list:
    events: list = []
    for d in deltas:
        events += parser.feed(d)
    return normalize(events + parser.finish())


# --8<-- [start:tools]
def tools_automaton(tools: list[dict]) -> gr.Automaton:
    """tool_choice="required" with several tools: {"name":"<one of them>","arguments":<its schema>}.
    A trie over the fixed prefixes '{"name":"f","arguments":' (the closing quote makes names prefix-free),
    then each tool's own parameter automaton, all ending in one accepting '}'."""
    a = gr.Automaton()
    ends_all = []
    for tool in tools:
        s = 0
        for ch in '{"name":' + json.dumps(tool["name"]) + ',"arguments":':
            s = a.edge(s, ch)                        # reuses the shared prefix '{"name":"'
        ends_all.append(gr._value(a, [s], tool["parameters"]))
    a.accept = a.new_state()
    for ends in ends_all:
        for e in ends:
            a.edge(e, "}", a.accept)
    return a
# --8<-- [end:tools]


def char_vocab(extra: list[str], specials: list[str]) -> tuple[list[str], list[bytes | None]]:
    """A toy vocabulary: every printable ASCII character, some multi-character pieces, then the special
    tokens (no bytes: the grammar never allows them)."""
    words = [chr(c) for c in range(32, 127)] + [w for w in extra if len(w) > 1]
    words = list(dict.fromkeys(words)) + specials
    return words, [None if w in specials else w.encode() for w in words]


# --8<-- [start:gate]
def is_reasoning_end(ids: list[int], start_id: int, end_id: int) -> bool:
    """vLLM's BaseThinkingReasoningParser.is_reasoning_end: scan backwards, the last think tag decides."""
    for t in reversed(ids):
        if t == start_id:
            return False
        if t == end_id:
            return True
    return False


def generate(logits_fn, index: np.ndarray, eos: int, prompt: list[int], rng: np.random.Generator,
             think: tuple[int, int] | None = None, constrain: bool = True, max_new: int = 400):
    """Sample until EOS. With think=(start_id, end_id) the grammar is gated like vLLM's
    StructuredOutputManager: should_fill_bitmask is False until the reasoning has ended (checked on the
    prompt first: a template may have closed the think span already), and should_advance skips the step
    that produced the end token, so the grammar's first token is the one after it.
    Returns (tokens, per-step trace of (reasoning ended before the step, number of allowed tokens))."""
    V = index.shape[1]
    ended = True if think is None else is_reasoning_end(prompt, *think)
    state, out, trace = 0, [], []
    for _ in range(max_new):
        logits = logits_fn(prompt + out, rng)
        allowed = index[state] != gr.DEAD if (constrain and ended) else np.ones(V, dtype=bool)
        trace.append((ended, int(allowed.sum())))
        z = np.where(allowed, logits, -np.inf)
        p = np.exp(z - z.max())
        tok = int(rng.choice(V, p=p / p.sum()))
        out.append(tok)
        if ended:
            state = int(index[state, tok]) if constrain else state
        elif tok == think[1]:
            ended = True                              # this token itself is not fed to the grammar
        if tok == eos:
            break
    return out, trace
# --8<-- [end:gate]
