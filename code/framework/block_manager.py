"""A small paged KV-cache block manager in the style of vLLM (docs/framework/paged-attention.md).

Physical blocks hold `block_size` tokens; each sequence owns a block table (logical block i ->
physical block id). Blocks are reference counted so that forks (parallel sampling, beam search)
and requests with a common prefix share them; a write to a shared block copies it first
(copy-on-write). Full blocks are registered under a chained hash of their tokens so that a later
request with the same prefix reuses them (prefix caching); freed cached blocks stay reusable until
evicted in LRU order.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

import torch


# --8<-- [start:hash]
def block_hash(parent: bytes | None, tokens: tuple[int, ...]) -> bytes:
    """Chained hash: a block's identity is its tokens *and* everything before it."""
    return hashlib.sha256(repr((parent, tokens)).encode()).digest()
# --8<-- [end:hash]


class OutOfBlocks(RuntimeError):
    pass


# --8<-- [start:manager]
class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True):
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.ref = [0] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))  # LRU order
        self.hash_of: dict[int, bytes] = {}  # physical block -> hash (full blocks only)
        self.cached: dict[bytes, int] = {}  # hash -> physical block
        self.tables: dict[int, list[int]] = {}  # seq id -> block table
        self.tokens: dict[int, list[int]] = {}
        self.hits = 0  # blocks reused from the prefix cache

    def num_free(self) -> int:
        return len(self.free)

    def _take_free(self) -> int:
        if not self.free:
            raise OutOfBlocks
        b, _ = self.free.popitem(last=False)  # least recently freed first
        if b in self.hash_of:  # evict its prefix-cache entry
            del self.cached[self.hash_of.pop(b)]
        self.ref[b] = 1
        return b

    def _share(self, b: int) -> int:
        if self.ref[b] == 0:  # a cached block sitting in the free list comes back to life
            del self.free[b]
        self.ref[b] += 1
        return b

    def _register(self, seq: int, i: int) -> None:
        """Give logical block i of seq (now full) its chained hash."""
        if not self.prefix_caching:
            return
        b = self.tables[seq][i]
        parent = self.hash_of.get(self.tables[seq][i - 1]) if i else None
        h = block_hash(parent, tuple(self.tokens[seq][i * self.block_size:(i + 1) * self.block_size]))
        if h not in self.cached and b not in self.hash_of:
            self.cached[h], self.hash_of[b] = b, h

    def allocate(self, seq: int, prompt: list[int]) -> int:
        """Blocks for a new prompt; returns how many prompt tokens were found in the cache."""
        bs, table, parent = self.block_size, [], None
        n_full = len(prompt) // bs
        need = -(-len(prompt) // bs)
        hit = 0
        if self.prefix_caching:
            for i in range(n_full):
                h = block_hash(parent, tuple(prompt[i * bs:(i + 1) * bs]))
                if h not in self.cached:
                    break
                table.append(self._share(self.cached[h]))
                parent, hit = h, hit + 1
        if need - hit > self.num_free():
            for b in table:  # roll back
                self._release(b)
            raise OutOfBlocks
        table += [self._take_free() for _ in range(need - hit)]
        self.tables[seq], self.tokens[seq] = table, list(prompt)
        for i in range(hit, n_full):
            self._register(seq, i)
        self.hits += hit
        return hit * bs

    def append(self, seq: int, token: int) -> tuple[int, int] | None:
        """Make room for one more token; returns (src, dst) if a block had to be copied."""
        table, n = self.tables[seq], len(self.tokens[seq])
        copy = None
        if n % self.block_size == 0:  # last block full (or no block yet): open a new one
            table.append(self._take_free())
        elif self.ref[table[-1]] > 1:  # shared partial block: copy-on-write
            src = table[-1]
            dst = self._take_free()
            self.ref[src] -= 1
            table[-1], copy = dst, (src, dst)
        self.tokens[seq].append(token)
        if len(self.tokens[seq]) % self.block_size == 0:
            self._register(seq, len(table) - 1)
        return copy

    def fork(self, parent: int, child: int) -> None:
        """Parallel sampling / beam search: the child shares every block of the parent."""
        self.tables[child] = [self._share(b) for b in self.tables[parent]]
        self.tokens[child] = list(self.tokens[parent])

    def _release(self, b: int) -> None:
        self.ref[b] -= 1
        if self.ref[b] == 0:
            self.free[b] = None  # most recently freed goes to the back

    def free_seq(self, seq: int) -> None:
        for b in reversed(self.tables.pop(seq)):  # tail blocks first: evicted before the shared head
            self._release(b)
        del self.tokens[seq]

    def slot(self, seq: int, pos: int) -> int:
        """Flat slot index of token `pos` of `seq` in a [num_blocks * block_size, ...] cache."""
        return self.tables[seq][pos // self.block_size] * self.block_size + pos % self.block_size
# --8<-- [end:manager]


# --8<-- [start:paged-attention]
def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_table: list[int], seq_len: int) -> torch.Tensor:
    """Decode attention of one query q [heads, d] over a paged cache
    k_cache, v_cache [num_blocks, block_size, kv_heads, d]. Blocks are visited in table
    order with an online softmax, as the PagedAttention kernel does; GQA repeats KV heads."""
    heads, d = q.shape
    bs, kv_heads = k_cache.shape[1], k_cache.shape[2]
    g = heads // kv_heads
    m = torch.full((heads,), float("-inf"), dtype=q.dtype)
    s = torch.zeros(heads, dtype=q.dtype)
    acc = torch.zeros(heads, d, dtype=q.dtype)
    for i, b in enumerate(block_table):
        n = min(bs, seq_len - i * bs)
        if n <= 0:
            break
        k = k_cache[b, :n].repeat_interleave(g, dim=1)  # [n, heads, d]
        v = v_cache[b, :n].repeat_interleave(g, dim=1)
        logits = torch.einsum("hd,nhd->hn", q, k) / d**0.5
        m_new = torch.maximum(m, logits.max(dim=1).values)
        scale = torch.exp(m - m_new)
        p = torch.exp(logits - m_new[:, None])
        s = s * scale + p.sum(dim=1)
        acc = acc * scale[:, None] + torch.einsum("hn,nhd->hd", p, v)
        m = m_new
    return acc / s[:, None]
# --8<-- [end:paged-attention]


# --8<-- [start:waste]
def reserved_tokens(used: int, policy: str, block_size: int = 16, max_len: int = 2048) -> int:
    """KV slots held by a sequence that currently has `used` tokens."""
    if policy == "contiguous":  # pre-allocate the maximum length up front
        return max_len
    if policy == "paged":
        return -(-used // block_size) * block_size
    raise ValueError(policy)


def waste_over_trace(requests: list[tuple[int, int]], policy: str, **kw) -> float:
    """Fraction of reserved KV slots not holding a token, averaged over every decode step of
    every request in a trace of (prompt_len, output_len)."""
    reserved = used = 0
    for prompt, out in requests:
        for t in range(1, out + 1):  # after the t-th generated token
            u = prompt + t
            used += u
            reserved += reserved_tokens(u, policy, **kw)
    return 1 - used / reserved
# --8<-- [end:waste]
