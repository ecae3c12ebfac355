"""Collectives built from point-to-point send/recv, with the bytes each rank sends counted, and the
alpha-beta cost models they are checked against.

The algorithm functions run inside a gloo rank (start them with code/framework/dist_launch.launch).
Each takes a 1-D tensor, never modifies it, and returns ``(result, bytes_sent_by_this_rank)``.
Checked against torch.distributed's own collectives by tests/test_runtime_collectives.py and
notebooks/runtime/collectives-cost-lab.ipynb.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _exchange(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int) -> int:
    """Send to dst and receive from src at the same time (isend first: no deadlock when both sides do it)."""
    req = dist.isend(send.contiguous(), dst)
    dist.recv(recv, src)
    req.wait()
    return _nbytes(send)


# --8<-- [start:ring]
def ring_reduce_scatter(x: torch.Tensor) -> tuple[list[torch.Tensor], int, int]:
    """Ring reduce-scatter over p chunks. Returns (chunks, index of the chunk this rank now owns fully reduced,
    bytes sent). Step s: send chunk (r - s) to the right neighbour, receive chunk (r - s - 1) from the left, add."""
    r, p = dist.get_rank(), dist.get_world_size()
    chunks = [c.clone() for c in x.tensor_split(p)]
    right, left = (r + 1) % p, (r - 1) % p
    sent = 0
    for s in range(p - 1):
        i_send, i_recv = (r - s) % p, (r - s - 1) % p
        buf = torch.empty_like(chunks[i_recv])
        sent += _exchange(chunks[i_send], right, buf, left)
        chunks[i_recv] += buf
    return chunks, (r + 1) % p, sent


def ring_all_gather(chunks: list[torch.Tensor], own: int) -> int:
    """Ring all-gather in place: this rank starts with chunks[own] valid; after p-1 steps every chunk is."""
    r, p = dist.get_rank(), dist.get_world_size()
    right, left = (r + 1) % p, (r - 1) % p
    sent = 0
    for s in range(p - 1):
        i_send, i_recv = (own - s) % p, (own - s - 1) % p
        buf = torch.empty_like(chunks[i_recv])
        sent += _exchange(chunks[i_send], right, buf, left)
        chunks[i_recv].copy_(buf)
    return sent


def ring_allreduce(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All-reduce = reduce-scatter + all-gather: 2(p-1) steps of n/p bytes each."""
    chunks, own, sent_rs = ring_reduce_scatter(x)
    sent_ag = ring_all_gather(chunks, own)
    return torch.cat(chunks), sent_rs + sent_ag
# --8<-- [end:ring]


# --8<-- [start:tree]
def btree(p: int, r: int) -> tuple[int, list[int]]:
    """NCCL's binary tree shape (src/graph/trees.cc, rewritten): root 0; odd ranks are leaves; a rank whose
    lowest set bit is b has children r - b/2 and r + b/2 (the latter shrunk until it fits). Returns (parent, children)."""
    if p == 1:
        return -1, []
    bit = 1
    while bit < p and not (bit & r):
        bit <<= 1
    if r == 0:
        return -1, [bit >> 1]
    parent = (r ^ bit) | (bit << 1)
    if parent >= p:
        parent = r ^ bit
    children, low = [], bit >> 1
    if low:
        children.append(r - low)
        while r + low >= p:
            low >>= 1
        if low:
            children.append(r + low)
    return parent, children


def dbtree(p: int, r: int, tree: int) -> tuple[int, list[int]]:
    """Second tree of the double binary tree: mirror the first (p even) or shift it by one rank (p odd),
    so that (for even p) a rank is an inner node in at most one of the two trees."""
    if tree == 0:
        return btree(p, r)
    to_pos = (lambda q: p - 1 - q) if p % 2 == 0 else (lambda q: (q - 1) % p)
    to_rank = (lambda q: p - 1 - q) if p % 2 == 0 else (lambda q: (q + 1) % p)
    parent, children = btree(p, to_pos(r))
    return (to_rank(parent) if parent >= 0 else -1), [to_rank(c) for c in children]


def _tree_allreduce_part(x: torch.Tensor, parent: int, children: list[int]) -> tuple[torch.Tensor, int]:
    """Reduce up the tree to its root, then broadcast down: every non-root sends n up, every rank n per child down."""
    acc, sent = x.clone(), 0
    for c in children:  # reduce phase: wait for each subtree's partial sum
        buf = torch.empty_like(acc)
        dist.recv(buf, c)
        acc += buf
    if parent >= 0:
        dist.send(acc, parent)
        sent += _nbytes(acc)
        dist.recv(acc, parent)  # broadcast phase: the root's total comes back down
    for c in children:
        dist.send(acc, c)
        sent += _nbytes(acc)
    return acc, sent


def tree_allreduce(x: torch.Tensor, double: bool = True) -> tuple[torch.Tensor, int]:
    """Binary-tree all-reduce; with double=True each of NCCL's two complementary trees carries half the data."""
    r, p = dist.get_rank(), dist.get_world_size()
    if not double:
        return _tree_allreduce_part(x, *btree(p, r))
    halves, out, sent = x.tensor_split(2), [], 0
    for t, half in enumerate(halves):
        res, s = _tree_allreduce_part(half, *dbtree(p, r, t))
        out.append(res)
        sent += s
    return torch.cat(out), sent
# --8<-- [end:tree]


# --8<-- [start:rd]
def _fold_in(x: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """Non-power-of-two p (MPICH's trick): with q = 2**floor(log2 p) and e = p - q, each of the first e even
    ranks hands its vector to the next odd rank and sits out. Returns (acc, new rank or -1, q, bytes sent)."""
    r, p = dist.get_rank(), dist.get_world_size()
    q = 1 << (p.bit_length() - 1)
    e, acc, sent = p - q, x.clone(), 0
    if r < 2 * e:
        if r % 2 == 0:
            dist.send(acc, r + 1)
            return acc, -1, q, _nbytes(acc)
        buf = torch.empty_like(acc)
        dist.recv(buf, r - 1)
        acc = acc + buf
        return acc, r // 2, q, sent
    return acc, r - e, q, sent


def _real(v: int, p: int) -> int:
    """Map a rank of the power-of-two sub-group back to its real rank."""
    e = p - (1 << (p.bit_length() - 1))
    return 2 * v + 1 if v < e else v + e


def _fold_out(acc: torch.Tensor, vr: int) -> int:
    r = dist.get_rank()
    p = dist.get_world_size()
    e = p - (1 << (p.bit_length() - 1))
    if r < 2 * e:
        if r % 2 == 0:
            dist.recv(acc, r + 1)
            return 0
        dist.send(acc, r - 1)
        return _nbytes(acc)
    return 0


def recursive_doubling_allreduce(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """log2(q) steps; at step k exchange the WHOLE vector with partner vr XOR 2**k and add."""
    p = dist.get_world_size()
    acc, vr, q, sent = _fold_in(x)
    if vr >= 0:
        mask = 1
        while mask < q:
            partner = _real(vr ^ mask, p)
            buf = torch.empty_like(acc)
            sent += _exchange(acc, partner, buf, partner)
            acc = acc + buf  # IEEE addition is commutative, so both partners get the same bits
            mask <<= 1
    sent += _fold_out(acc, vr)
    return acc, sent


def rabenseifner_allreduce(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Reduce-scatter by recursive halving (send n/2, n/4, ...), then all-gather by recursive doubling
    (send back n/q, 2n/q, ...): bandwidth term 2(q-1)/q * n like the ring, latency term 2 log2 q."""
    p = dist.get_world_size()
    acc, vr, q, sent = _fold_in(x)
    if vr >= 0:
        blocks = list(acc.tensor_split(q))
        lo, hi, mask = 0, q, q >> 1
        while mask >= 1:  # halving: keep the half of [lo, hi) on my side of the split
            partner = _real(vr ^ mask, p)
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if vr < (vr ^ mask) else ((mid, hi), (lo, mid))
            send = torch.cat(blocks[give[0]:give[1]])
            recv = torch.empty_like(torch.cat(blocks[keep[0]:keep[1]]))
            sent += _exchange(send, partner, recv, partner)
            parts = recv.split([b.numel() for b in blocks[keep[0]:keep[1]]])
            for j, part in zip(range(*keep), parts):
                blocks[j] = blocks[j] + part
            lo, hi = keep
            mask >>= 1
        mask = 1
        while mask < q:  # doubling: swap the owned range with the partner, ranges grow back to [0, q)
            partner = _real(vr ^ mask, p)
            size = hi - lo
            plo = lo + size if (vr & mask) == 0 else lo - size
            recv = torch.empty_like(torch.cat(blocks[plo:plo + size]))
            sent += _exchange(torch.cat(blocks[lo:hi]), partner, recv, partner)
            for j, part in zip(range(plo, plo + size), recv.split([b.numel() for b in blocks[plo:plo + size]])):
                blocks[j] = part
            lo, hi = min(lo, plo), max(hi, plo + size)
            mask <<= 1
        acc = torch.cat(blocks)
    sent += _fold_out(acc, vr)
    return acc, sent
# --8<-- [end:rd]


# --8<-- [start:a2a]
def pairwise_all_to_all(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x holds p equal blocks, block j destined for rank j. Step s = 1..p-1: send block (r+s) to rank r+s,
    receive block r from rank r-s. Every rank sends (p-1)/p of its buffer."""
    r, p = dist.get_rank(), dist.get_world_size()
    blocks = list(x.tensor_split(p))
    out = [None] * p
    out[r] = blocks[r].clone()
    sent = 0
    for s in range(1, p):
        dst, src = (r + s) % p, (r - s) % p
        buf = torch.empty_like(blocks[src])
        sent += _exchange(blocks[dst], dst, buf, src)
        out[src] = buf
    return torch.cat(out), sent
# --8<-- [end:a2a]


# --8<-- [start:volume]
def sent_bytes_formula(algo: str, p: int, n: int, r: int) -> int:
    """Bytes rank r sends for an n-byte vector (n divisible by 2p, and by 2 * the tree split), per the cost model."""
    q = 1 << (p.bit_length() - 1)
    e = p - q
    folded = r < 2 * e  # a rank of the non-power-of-two pre/post step
    if algo == "ring":
        return 2 * (p - 1) * n // p
    if algo in ("ring_rs", "ring_ag", "a2a"):
        return (p - 1) * n // p
    if algo in ("tree", "dbtree"):
        trees = [btree(p, r)] if algo == "tree" else [dbtree(p, r, 0), dbtree(p, r, 1)]
        part = n // len(trees)
        return sum(part * ((parent >= 0) + len(children)) for parent, children in trees)
    if algo == "rd":
        return n if (folded and r % 2 == 0) else n * (int(math.log2(q)) + folded)
    if algo == "rabenseifner":
        return n if (folded and r % 2 == 0) else 2 * (q - 1) * n // q + folded * n
    raise ValueError(algo)
# --8<-- [end:volume]


ALGOS = {
    "ring": ring_allreduce,
    "tree": lambda x: tree_allreduce(x, double=False),
    "dbtree": tree_allreduce,
    "rd": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
}


def make_input(rank: int, numel: int) -> torch.Tensor:
    """Integer-valued float32 (|v| < 2**10): every partial sum is an exact integer below 2**24, so any
    summation order gives the bitwise same result and the comparison with dist.all_reduce can be exact."""
    g = torch.Generator().manual_seed(1234 + rank)
    return torch.randint(-1000, 1000, (numel,), generator=g).to(torch.float32)


def worker_check(rank: int, world_size: int, numel: int, algos: list[str]) -> dict:
    """Run every algorithm on this rank's input; return results, reference and byte counts."""
    x = make_input(rank, numel)
    ref = x.clone()
    dist.all_reduce(ref)
    out = {"ref": ref.numpy(), "numel_bytes": _nbytes(x)}
    for name in algos:
        res, sent = ALGOS[name](x)
        out[name] = (res.numpy(), sent)
    chunks, own, sent_rs = ring_reduce_scatter(x)
    rs_ref = torch.empty_like(chunks[own])
    dist.reduce_scatter(rs_ref, [c.clone() for c in x.tensor_split(world_size)])
    out["ring_rs"] = (chunks[own].numpy(), own, rs_ref.numpy(), sent_rs)  # torch gives rank r chunk r
    gathered = [torch.empty_like(c) for c in x.tensor_split(world_size)]
    dist.all_gather(gathered, x.tensor_split(world_size)[rank].contiguous())
    mine = [c.clone() for c in x.tensor_split(world_size)]
    sent_ag = ring_all_gather(mine, rank)
    out["ring_ag"] = (torch.cat(mine).numpy(), torch.cat(gathered).numpy(), sent_ag)
    a2a, sent_a2a = pairwise_all_to_all(x)
    a2a_ref = torch.empty_like(x)
    dist.all_to_all_single(a2a_ref, x)
    out["a2a"] = (a2a.numpy(), a2a_ref.numpy(), sent_a2a)
    return out


# --8<-- [start:model]
def model_time(algo: str, coll: str, p: int, n: float, alpha: float, beta: float) -> float:
    """alpha-beta(-no gamma) time in seconds: alpha per message step, beta seconds per byte on one link
    direction, n the per-rank buffer in bytes (for all-gather/reduce-scatter/all-to-all: the full buffer)."""
    lg = math.ceil(math.log2(p))
    if coll == "allreduce":
        if algo == "ring":
            return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta
        if algo == "rd":
            return lg * (alpha + n * beta)
        if algo == "rabenseifner":
            return 2 * lg * alpha + 2 * (p - 1) / p * n * beta
        if algo in ("tree", "dbtree"):  # pipelined: (D + k) steps of one segment, c*n bytes through the busiest rank
            c = 3 if algo == "tree" else 2
            depth_steps = 2 * lg - 1
            k = max(1.0, math.sqrt(depth_steps * c * n * beta / alpha))
            return (depth_steps + k) * (alpha + c * n * beta / k)
    if coll in ("allgather", "reducescatter"):
        if algo == "ring":
            return (p - 1) * alpha + (p - 1) / p * n * beta
        if algo in ("rd", "rabenseifner"):  # recursive doubling / halving
            return lg * alpha + (p - 1) / p * n * beta
    if coll == "alltoall":
        if algo == "pairwise":
            return (p - 1) * alpha + (p - 1) / p * n * beta
        if algo == "bruck":
            return lg * alpha + lg * n / 2 * beta
    raise ValueError((algo, coll))
# --8<-- [end:model]


def crossover_ring_rd(p: int, alpha: float, beta: float) -> float:
    """Message size where ring and recursive-doubling all-reduce take the same model time."""
    lg = math.log2(p)
    return alpha * (2 * (p - 1) - lg) / (beta * (lg - 2 * (p - 1) / p))


BUSBW_FACTOR = {"allreduce": lambda p: 2 * (p - 1) / p, "allgather": lambda p: (p - 1) / p,
                "reducescatter": lambda p: (p - 1) / p, "alltoall": lambda p: (p - 1) / p,
                "broadcast": lambda p: 1.0, "reduce": lambda p: 1.0}
