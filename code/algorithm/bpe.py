"""Byte-level BPE written from scratch (docs/algorithm/tokenization.md,
notebooks/algorithm/bpe-lab.ipynb).

Training follows Sennrich et al. (2016) on the bytes of GPT-2's pre-tokenised chunks; the
bookkeeping (pair counts, where each pair occurs, a lazy max-heap) and the tie rule follow the
Hugging Face `tokenizers` BpeTrainer (tokenizers/src/models/bpe/trainer.rs), so that the merge list
and the token ids come out equal to it. Encoding applies merges by rank, the leftmost first among
equal ranks (tokenizers' Word::merge_all, GPT-2's encoder.py). Tested in
tests/test_algorithm_tokenization.py against `tokenizers` trained on the same text.
"""
from __future__ import annotations

import heapq
from collections import Counter, defaultdict

import regex

# --8<-- [start:pretokenize]
# GPT-2 (encoder.py) and tokenizers' ByteLevel pre-tokenizer: contractions, an optional space plus
# a run of letters / digits / other symbols, and whitespace (a space stays in front of the next word).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# GPT-4's cl100k_base (tiktoken_ext/openai_public.py): case-insensitive contractions, at most
# three digits per chunk, one leading non-letter glued to a word, a chunk of whitespace ends at its
# last newline (the next line's indentation is a chunk of its own).
GPT4_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}"""
                r"""| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: bytes that are visible Latin-1 characters map to
    themselves, the other 68 (controls, space, 0x7F-0xA0, 0xAD) to U+0100 onwards, so that a space
    shows as 'Ġ' and a newline as 'Ċ'. Only a display convention: the tokens are bytes."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHAR = bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def pretokenize(text: str, pattern: str = GPT2_PATTERN) -> list[str]:
    """Split text into chunks; BPE never merges across two chunks."""
    return regex.findall(pattern, text)
# --8<-- [end:pretokenize]


def to_display(token: bytes) -> str:
    """A token's bytes written with GPT-2's printable characters (how tokenizer.json stores them)."""
    return "".join(BYTE_CHAR[b] for b in token)


# --8<-- [start:train-simple]
def train_simple(texts, vocab_size: int, special_tokens=(), pattern: str = GPT2_PATTERN, tie: str = "ids"):
    """The algorithm in its plainest form: count every adjacent pair (weighted by how often its
    chunk occurs), merge the most frequent one everywhere, repeat. O(merges x corpus): for small
    corpora and for reading. tie="ids" breaks ties by the smallest (left id, right id) like
    tokenizers; tie="first" takes the pair seen first in the text (what `max` over a dict does,
    as in minbpe) and drifts away from tokenizers at the first tie the two rules break differently."""
    words = Counter()
    for text in texts:
        words.update(pretokenize(text, pattern))
    vocab = [t.encode() for t in special_tokens] + [bytes([CHAR_BYTE[c]]) for c in sorted(CHAR_BYTE)]
    ids = {tok: i for i, tok in enumerate(vocab)}
    symbols = [[ids[bytes([b])] for b in w.encode()] for w in words]
    freq = list(words.values())
    merges, ties = [], 0
    while len(ids) < vocab_size:
        count = Counter()
        for syms, f in zip(symbols, freq):
            for pair in zip(syms, syms[1:]):
                count[pair] += f
        if not count:
            break
        top = max(count.values())
        tied = [p for p, c in count.items() if c == top]
        ties += len(tied) > 1
        a, b = min(tied) if tie == "ids" else tied[0]
        token = vocab[a] + vocab[b]
        if token not in ids:
            ids[token] = len(vocab)
            vocab.append(token)
        merges.append(((a, b), ids[token]))
        for syms in symbols:
            _merge_word(syms, a, b, ids[token])
    return vocab, merges, ties
# --8<-- [end:train-simple]


# --8<-- [start:train]
def _merge_word(word: list[int], a: int, b: int, new: int) -> list[tuple[tuple[int, int], int]]:
    """Replace every non-overlapping (a, b) in `word`, left to right, in place. Returns the change
    of each neighbouring pair: the pairs that touched the merged couple lose one occurrence, the
    pairs with the new token gain one (the count of (a, b) itself is never used again)."""
    changes, i = [], 0
    while i < len(word) - 1:
        if word[i] == a and word[i + 1] == b:
            if i > 0:
                changes += [((word[i - 1], a), -1), ((word[i - 1], new), +1)]
            word[i:i + 2] = [new]
            if i < len(word) - 1:
                changes += [((b, word[i + 1]), -1), ((new, word[i + 1]), +1)]
        i += 1
    return changes


def train(texts, vocab_size: int, special_tokens=(), pattern: str = GPT2_PATTERN):
    """Learn merges until the vocabulary (special tokens + 256 bytes + merged tokens) has
    `vocab_size` entries. Returns (vocab, merges): vocab[i] is the bytes of token i, merges the
    list of ((left id, right id), new id) in the order learned, i.e. by rank.

    Ids and ties as in tokenizers' BpeTrainer: special tokens first, then the 256 bytes ordered by
    the code point of their printable stand-in (so '!' is id 0 and the space 'Ġ' comes late), then
    one id per new token. Among pairs with the same count the smallest (left id, right id) wins."""
    words = Counter()
    for text in texts:
        words.update(pretokenize(text, pattern))
    vocab = [t.encode() for t in special_tokens]
    vocab += [bytes([CHAR_BYTE[c]]) for c in sorted(CHAR_BYTE)]
    ids = {tok: i for i, tok in enumerate(vocab)}
    symbols = [[ids[bytes([b])] for b in w.encode()] for w in words]
    freq = list(words.values())

    count, where = defaultdict(int), defaultdict(set)
    for w, (syms, f) in enumerate(zip(symbols, freq)):
        for pair in zip(syms, syms[1:]):
            count[pair] += f
            where[pair].add(w)
    # A max-heap of (count, pair) as a min-heap of (-count, left, right). Counts only fall after a
    # merge, so a popped entry whose count is stale goes back with the current count (lazy update).
    heap, seq = [], 0
    for pair, pos in where.items():
        heap.append((-count[pair], pair[0], pair[1], seq, pos))
        seq += 1
    heapq.heapify(heap)

    merges = []
    while len(ids) < vocab_size and heap:
        neg, a, b, _, pos = heapq.heappop(heap)
        if -neg != count[(a, b)]:
            heapq.heappush(heap, (-count[(a, b)], a, b, seq, pos))
            seq += 1
            continue
        if -neg < 1:
            break
        token = vocab[a] + vocab[b]
        if token not in ids:            # two different pairs can spell the same bytes: reuse the id
            ids[token] = len(vocab)
            vocab.append(token)
        new = ids[token]
        merges.append(((a, b), new))
        fresh = defaultdict(set)
        for w in pos:
            for pair, change in _merge_word(symbols[w], a, b, new):
                count[pair] += change * freq[w]
                if change > 0:
                    fresh[pair].add(w)
        for pair, ws in fresh.items():
            if count[pair] > 0:
                heapq.heappush(heap, (-count[pair], pair[0], pair[1], seq, ws))
                seq += 1
    return vocab, merges
# --8<-- [end:train]


# --8<-- [start:encode]
class ByteBPE:
    """Encoder/decoder for a trained (vocab, merges)."""

    def __init__(self, vocab, merges, special_tokens=(), pattern: str = GPT2_PATTERN):
        self.vocab, self.pattern = list(vocab), pattern
        self.rank = {pair: (r, new) for r, (pair, new) in enumerate(merges)}
        self.byte_id = {tok[0]: i for i, tok in enumerate(self.vocab) if len(tok) == 1}
        self.special = {}
        for s in special_tokens:
            if s.encode() not in self.vocab:
                self.vocab.append(s.encode())
            self.special[s] = self.vocab.index(s.encode())
        self._special_re = (regex.compile("(" + "|".join(regex.escape(s) for s in self.special) + ")")
                            if self.special else None)
        self._cache = {}

    def encode_chunk(self, chunk: str) -> list[int]:
        """Bytes of one chunk, then repeatedly merge the adjacent pair of lowest rank (the leftmost
        if it occurs twice) until no adjacent pair has a rank. Byte-level: every string encodes."""
        if chunk in self._cache:
            return self._cache[chunk]
        word = [self.byte_id[b] for b in chunk.encode()]
        while len(word) > 1:
            best = min(((self.rank[p][0], i) for i, p in enumerate(zip(word, word[1:])) if p in self.rank),
                       default=None)
            if best is None:
                break
            i = best[1]
            word[i:i + 2] = [self.rank[(word[i], word[i + 1])][1]]
        self._cache[chunk] = word
        return word

    def encode(self, text: str) -> list[int]:
        """Special tokens are matched first and never split; the text between them is
        pre-tokenised and each chunk encoded on its own."""
        parts = self._special_re.split(text) if self._special_re else [text]
        out = []
        for part in parts:
            if part in self.special:
                out.append(self.special[part])
            else:
                for chunk in pretokenize(part, self.pattern):
                    out += self.encode_chunk(chunk)
        return out

    def encode_with_offsets(self, text: str):
        """Token ids and, for each token, the [start, end) range of characters it covers (a token
        that holds part of a multi-byte character covers that whole character)."""
        ids = self.encode(text)
        char_of_byte = [i for i, ch in enumerate(text) for _ in ch.encode()] + [len(text)]
        spans, pos = [], 0
        for i in ids:
            n = len(self.vocab[i])
            spans.append((char_of_byte[pos], char_of_byte[pos + n - 1] + 1))
            pos += n
        return ids, spans

    def decode(self, ids) -> str:
        """Concatenate the bytes; a token boundary may cut a UTF-8 character, so decode the whole."""
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")
# --8<-- [end:encode]


def hf_style_merges(vocab, merges) -> list[tuple[str, str]]:
    """The merge list as tokenizer.json writes it: pairs of printable strings."""
    return [(to_display(vocab[a]), to_display(vocab[b])) for (a, b), _ in merges]


# --8<-- [start:unigram]
def unigram_viterbi(word: str, logp: dict[str, float], max_len: int = 16) -> list[str]:
    """Unigram LM segmentation (Kudo 2018, SentencePiece): of all ways to cut `word` into pieces of
    the vocabulary, the one with the largest sum of piece log-probabilities, by dynamic programming
    over end positions. BPE replays merges instead; it never scores whole segmentations."""
    best = [0.0] + [float("-inf")] * len(word)
    back = [0] * (len(word) + 1)
    for end in range(1, len(word) + 1):
        for start in range(max(0, end - max_len), end):
            piece = word[start:end]
            if piece in logp and best[start] + logp[piece] > best[end]:
                best[end], back[end] = best[start] + logp[piece], start
    pieces, end = [], len(word)
    while end > 0:
        pieces.append(word[back[end]:end])
        end = back[end]
    return pieces[::-1]
# --8<-- [end:unigram]


# --8<-- [start:vocab-cost]
def vocab_params(vocab_size: int, d_model: int, tied: bool) -> int:
    """Parameters spent on the vocabulary: the input embedding (V x d) and the LM head (d x V),
    once if the two share one matrix."""
    return vocab_size * d_model * (1 if tied else 2)


def lm_head_flops_per_token(vocab_size: int, d_model: int) -> int:
    """Forward FLOPs of the output projection for one token: a (1 x d) @ (d x V) product, one
    multiply and one add per weight. The embedding lookup is a gather, not a matmul: ~0 FLOPs."""
    return 2 * vocab_size * d_model
# --8<-- [end:vocab-cost]
