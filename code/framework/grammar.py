"""Structured outputs as an engine does them (docs/framework/structured-outputs.md,
notebooks/framework/structured-output-lab.ipynb).

A JSON-Schema subset (an object whose properties, all required and written in order, are string enums,
bounded integers, booleans or nested objects of the same kind; compact JSON without whitespace) is
compiled to a deterministic automaton over characters. Walking every token's bytes through it from
every state gives the Outlines-style index: next_state[state, token], -1 where the token is not allowed,
so the mask of a step is one row lookup. States with a single way out carry a forced string, the
compressed FSM of SGLang, and jump-forward decoding appends its tokens without sampling them.
"""
from __future__ import annotations

import json
import random
import string

import numpy as np

DEAD = -1


# --8<-- [start:compile]
class Automaton:
    """A DFA over characters: trans[s] maps a character to the next state; `accept` is the one final
    state (the closing brace of the top-level object, from which nothing continues)."""

    def __init__(self):
        self.trans: list[dict[str, int]] = [{}]
        self.accept = -1

    def new_state(self) -> int:
        self.trans.append({})
        return len(self.trans) - 1

    def edge(self, src: int, ch: str, dst: int | None = None) -> int:
        """Add src --ch--> dst (a new state if dst is None); reuse an existing edge (shared prefixes)."""
        if ch in self.trans[src]:
            assert dst is None or self.trans[src][ch] == dst, "not deterministic"
            return self.trans[src][ch]
        self.trans[src][ch] = self.new_state() if dst is None else dst
        return self.trans[src][ch]

    def walk(self, state: int, text: str) -> int:
        """Follow text from state; DEAD as soon as a character has no edge."""
        for ch in text:
            state = self.trans[state].get(ch, DEAD) if state != DEAD else DEAD
        return state


def _literal(a: Automaton, ends: list[int], text: str) -> list[int]:
    for ch in text:
        nxt = a.new_state()
        for e in ends:
            a.edge(e, ch, nxt)
        ends = [nxt]
    return ends


def _choice(a: Automaton, ends: list[int], words: list[str]) -> list[int]:
    """A trie of the (prefix-free) alternatives; all leaves end in one state."""
    end = a.new_state()
    for w in words:
        states = ends
        for i, ch in enumerate(w):
            last = i == len(w) - 1
            states = [a.edge(s, ch, end if last else None) for s in states]
            states = list(dict.fromkeys(states))
    return [end]


def _integer(a: Automaton, ends: list[int], digits: int) -> list[int]:
    """-?(0|[1-9][0-9]{0,digits-1}): every state after a digit may end the number."""
    minus = a.new_state()
    zero, first = a.new_state(), a.new_state()
    for e in ends:
        a.edge(e, "-", minus)
    for s in ends + [minus]:
        a.edge(s, "0", zero)
        for d in "123456789":
            a.edge(s, d, first)
    out, cur = [zero, first], first
    for _ in range(digits - 1):
        nxt = a.new_state()
        for d in string.digits:
            a.edge(cur, d, nxt)
        out.append(nxt)
        cur = nxt
    return out


def _int_digits(node: dict) -> int:
    hi, lo = node.get("maximum"), node.get("minimum")
    if hi is None or lo is None or lo != -hi or hi <= 0 or set(str(hi)) != {"9"}:
        raise ValueError("integer needs minimum = -maximum and maximum = 9...9 (a digit bound)")
    return len(str(hi))


def _value(a: Automaton, ends: list[int], node: dict) -> list[int]:
    kind = node.get("type")
    if kind == "object":
        props = node.get("properties", {})
        if list(node.get("required", [])) != list(props) or node.get("additionalProperties") is not False:
            raise ValueError("objects must require every property, in order, and forbid others")
        ends = _literal(a, ends, "{")
        for i, (key, sub) in enumerate(props.items()):
            ends = _literal(a, ends, ("," if i else "") + json.dumps(key) + ":")
            ends = _value(a, ends, sub)
        return _literal(a, ends, "}")
    if kind == "string" and "enum" in node:
        return _choice(a, ends, [json.dumps(v) for v in node["enum"]])
    if kind == "boolean":
        return _choice(a, ends, ["true", "false"])
    if kind == "integer":
        return _integer(a, ends, _int_digits(node))
    raise ValueError(f"unsupported schema node: {node}")


def compile_schema(schema: dict) -> Automaton:
    a = Automaton()
    (a.accept,) = _value(a, [0], schema)
    return a
# --8<-- [end:compile]


def random_instance(schema: dict, rng: random.Random):
    """A random document of the schema (training text for the tokenizer, and test data)."""
    kind = schema["type"]
    if kind == "object":
        return {k: random_instance(v, rng) for k, v in schema["properties"].items()}
    if kind == "string":
        return rng.choice(schema["enum"])
    if kind == "boolean":
        return rng.random() < 0.5
    hi = schema["maximum"]
    return rng.choice([0, rng.randint(-hi, hi), rng.randint(-9, 9)])


def dump(doc) -> str:
    """Compact JSON, the only layout the automaton accepts."""
    return json.dumps(doc, separators=(",", ":"))


# --8<-- [start:bytes]
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet: every byte is shown as one printable character; invert it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(tokenizer, special: set[str]) -> list[bytes | None]:
    """The bytes of every token of a byte-level BPE vocabulary (None for special tokens)."""
    dec = byte_decoder()
    vocab = tokenizer.get_vocab()
    out: list[bytes | None] = [None] * len(vocab)
    for tok, i in vocab.items():
        out[i] = None if tok in special else bytes(dec[c] for c in tok)
    return out
# --8<-- [end:bytes]


# --8<-- [start:index]
def transition_table(a: Automaton) -> np.ndarray:
    """trans[s, byte] as an array, with one extra dead row (index S) that maps everything to itself.
    The grammar is ASCII, so a byte >= 128 has no edge anywhere."""
    S = len(a.trans)
    table = np.full((S + 1, 256), S, dtype=np.int32)
    for s, edges in enumerate(a.trans):
        for ch, t in edges.items():
            table[s, ord(ch)] = t
    return table


def token_index(a: Automaton, toks: list[bytes | None], eos_id: int) -> np.ndarray:
    """next_state[s, v] for every state and token: the token's bytes walked through the automaton from
    s, DEAD if it leaves the grammar. Vectorised over all (state, token) pairs: one gather per byte
    position. EOS is allowed only in the accepting state (and keeps it there)."""
    table = transition_table(a)
    S, V = len(a.trans), len(toks)
    width = max(len(t) for t in toks if t)
    padded = np.full((V, width), -1, dtype=np.int32)           # -1: past the end of the token
    for v, t in enumerate(toks):
        if t:
            padded[v, :len(t)] = list(t)
        else:
            padded[v, 0] = 0                                     # special tokens: byte 0 is never allowed
    cur = np.broadcast_to(np.arange(S, dtype=np.int32)[:, None], (S, V)).copy()
    for j in range(width):
        b = padded[:, j]
        step = table[cur, np.maximum(b, 0)]
        cur = np.where(b[None, :] >= 0, step, cur)
    nxt = np.where(cur == S, DEAD, cur)
    nxt[:, eos_id] = DEAD
    nxt[a.accept, eos_id] = a.accept
    return nxt


def token_index_naive(a: Automaton, toks: list[bytes | None], eos_id: int, state: int) -> np.ndarray:
    """The same row, one token at a time in Python: what a step costs without the precomputed index."""
    row = np.full(len(toks), DEAD, dtype=np.int32)
    for v, t in enumerate(toks):
        if v == eos_id:
            row[v] = a.accept if state == a.accept else DEAD
        elif t is not None:
            row[v] = a.walk(state, t.decode("latin-1"))
    return row
# --8<-- [end:index]


# --8<-- [start:forced]
def forced_strings(a: Automaton) -> dict[int, tuple[str, int]]:
    """The compressed FSM: from every state with exactly one outgoing character (and not final), the
    whole chain of single-exit states is one edge labelled with its string. Returns
    {state: (forced string, state at its end)}."""
    out = {}
    for s in range(len(a.trans)):
        text, cur = "", s
        while len(a.trans[cur]) == 1 and cur != a.accept:
            (ch, nxt), = a.trans[cur].items()
            text, cur = text + ch, nxt
        if text:
            out[s] = (text, cur)
    return out
# --8<-- [end:forced]


def lost_at_end(a: Automaton, index: np.ndarray, toks: list[bytes | None], forced: dict, encode) -> dict:
    """The token-boundary problem of jump-forward at the END of a forced string: tokens that start with
    the forced string's last canonical token, run past its end into the free part, and are allowed by the
    grammar there. Ordinary constrained decoding could sample them; after a jump they are impossible,
    because the jump already committed the shorter token. {state: [such token ids]}."""
    out = {}
    for s, (text, _) in forced.items():
        ids = encode(text)
        before = a.walk(s, b"".join(toks[i] for i in ids[:-1]).decode("latin-1"))
        last = toks[ids[-1]]
        longer = [v for v, t in enumerate(toks) if t and len(t) > len(last) and t.startswith(last)
                  and index[before, v] != DEAD]
        if longer:
            out[s] = longer
    return out


# --8<-- [start:batch]
def constrained_batch(model, index: np.ndarray, eos_id: int, prompt: list[int], seeds: list[int],
                      max_new_tokens: int):
    """One request per seed, all in one batch, each row with its own automaton state. A step: gather the
    rows' masks from the precomputed index, sample (sampler.py: mask first, then the usual processing),
    advance every row's state with one more gather. The prompt is prefilled once and its KV copied."""
    import torch
    import sampler as sm

    idx = torch.from_numpy(index).long()
    allowed_table = idx != DEAD                      # [S, V]: every state's mask, precomputed
    B, V = len(seeds), index.shape[1]
    st = sm.BatchState([(prompt, sm.SamplingParams(temperature=1.0, seed=s)) for s in seeds], V)
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    cache = out.past_key_values
    cache.reorder_cache(torch.zeros(B, dtype=torch.long))
    logits = out.logits[:, -1].float().expand(B, -1)
    state = torch.zeros(B, dtype=torch.long)
    tokens = []
    for step in range(max_new_tokens):
        allowed = allowed_table[state]
        tok, _ = sm.sample(logits, st, allowed)
        st.record(tok)
        state = idx[state, tok]
        tokens.append(tok)
        if bool((tok == eos_id).all()):
            break
        out = model(input_ids=tok[:, None], past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1].float()
    seqs = torch.stack(tokens, 1).tolist()
    return [s[:s.index(eos_id) + 1] if eos_id in s else s for s in seqs]
# --8<-- [end:batch]


# --8<-- [start:jump]
def generate_one(model, a: Automaton, index: np.ndarray, forced: dict, encode, eos_id: int,
                 prompt: list[int], seed: int, jump: bool, max_new_tokens: int = 200, jumps=None):
    """One request under the grammar. A forced string is always emitted as encode(string), the canonical
    tokens of the string alone, and never sampled (no random numbers drawn). Without jump-forward each
    of those tokens still costs one forward pass; with it they are appended at once and fed to the model
    together with the previous token in ONE forward. Same tokens either way; returns
    (tokens, forward passes, token positions computed). `jumps`, a list, collects (previous token, forced
    string) for every jump, to study the token boundary."""
    import torch
    import sampler as sm

    V = index.shape[1]
    st = sm.BatchState([(prompt, sm.SamplingParams(temperature=1.0, seed=seed))], V)
    allowed_table = torch.from_numpy(index != DEAD)
    state, out, pending, queue, cache = 0, [], list(prompt), [], None
    forwards = computed = 0

    def absorb(t):
        nonlocal state
        out.append(t)
        state = int(index[state, t])
        st.record(torch.tensor([t]))

    while len(out) < max_new_tokens:
        if jump:
            while state in forced:                       # compressed edge: append its tokens, no forward
                if jumps is not None:
                    jumps.append((out[-1] if out else None, forced[state][0]))
                for t in encode(forced[state][0]):
                    absorb(t)
                    pending.append(t)
        if state == a.accept:                            # only EOS is allowed: no forward needed
            out.append(eos_id)
            break
        res = model(input_ids=torch.tensor([pending]), past_key_values=cache, use_cache=True)
        cache, logits = res.past_key_values, res.logits[:, -1].float()
        forwards, computed = forwards + 1, computed + len(pending)
        if not queue and not jump and state in forced:
            queue = encode(forced[state][0])
        if queue:                                        # forced token: the logits are not needed
            t = queue.pop(0)
        else:
            t = int(sm.sample(logits, st, allowed_table[state][None])[0][0])
        absorb(t)
        pending = [t]
    return out, forwards, computed
# --8<-- [end:jump]
