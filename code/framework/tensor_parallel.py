"""Megatron-style tensor parallelism by hand: column/row-parallel linear layers, a parallel attention + MLP
block, vocabulary-parallel embedding and cross-entropy, with every all-reduce logged (phase, numel).

Checked against the unsplit layers on TP groups of 2 and 4 gloo ranks by
notebooks/framework/tensor-parallel-lab.ipynb and tests/test_framework_parallel.py.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

COMM_LOG: list[tuple[str, str, int]] = []  # (op, "fwd"/"bwd", numel) of every collective issued here


def _all_reduce(x, group, phase, op=dist.ReduceOp.SUM):
    COMM_LOG.append(("all_reduce", phase, x.numel()))
    dist.all_reduce(x, op=op, group=group)
    return x


# --8<-- [start:fg]
class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity in forward, all-reduce of the input gradient in backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return _all_reduce(g.clone(), ctx.group, "bwd"), None


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all-reduce (sum of partial results) in forward, identity in backward."""

    @staticmethod
    def forward(ctx, x, group):
        return _all_reduce(x.clone(), group, "fwd")

    @staticmethod
    def backward(ctx, g):
        return g, None
# --8<-- [end:fg]


def shard(t: torch.Tensor, dim: int, rank: int, size: int) -> torch.Tensor:
    return t.chunk(size, dim=dim)[rank].clone()


# --8<-- [start:block]
class ParallelBlock(nn.Module):
    """Pre-LN transformer block, attention heads and MLP columns split over a TP group of size t.
    Q/K/V and W1 are column-parallel (split the output dim), Wo and W2 row-parallel (split the input dim)."""

    def __init__(self, ref: "Block", group):
        super().__init__()
        self.group, t, r = group, dist.get_world_size(group), dist.get_rank(group)
        self.heads = ref.heads // t  # requires heads % t == 0
        self.ln1, self.ln2 = ref.ln1, ref.ln2  # replicated (inputs are replicated, so are their grads)
        col = lambda lin: (nn.Parameter(shard(lin.weight.data, 0, r, t)), nn.Parameter(shard(lin.bias.data, 0, r, t)))
        self.wq, self.bq = col(ref.q)
        self.wk, self.bk = col(ref.k)
        self.wv, self.bv = col(ref.v)
        self.w1, self.b1 = col(ref.fc1)
        self.wo = nn.Parameter(shard(ref.o.weight.data, 1, r, t))
        self.w2 = nn.Parameter(shard(ref.fc2.weight.data, 1, r, t))
        self.bo, self.b2 = ref.o.bias, ref.fc2.bias  # added once, after the all-reduce

    def forward(self, x):  # x: (b, s, h), replicated on every rank of the group
        b, s, _ = x.shape
        a = CopyToTP.apply(self.ln1(x), self.group)  # f: 1 all-reduce in backward
        q, k, v = (F.linear(a, w, bb).view(b, s, self.heads, -1).transpose(1, 2)
                   for w, bb in ((self.wq, self.bq), (self.wk, self.bk), (self.wv, self.bv)))
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # local heads only
        part = F.linear(ctx.transpose(1, 2).reshape(b, s, -1), self.wo)  # partial sum over head groups
        x = x + ReduceFromTP.apply(part, self.group) + self.bo  # g: 1 all-reduce in forward
        m = CopyToTP.apply(self.ln2(x), self.group)  # f
        part = F.linear(F.gelu(F.linear(m, self.w1, self.b1)), self.w2)  # GeLU is elementwise: no comm
        return x + ReduceFromTP.apply(part, self.group) + self.b2  # g
# --8<-- [end:block]


class Block(nn.Module):
    """The unsplit reference."""

    def __init__(self, h=16, heads=4, ffn=64):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x):
        b, s, _ = x.shape
        a = self.ln1(x)
        q, k, v = (lin(a).view(b, s, self.heads, -1).transpose(1, 2) for lin in (self.q, self.k, self.v))
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(ctx.transpose(1, 2).reshape(b, s, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


# --8<-- [start:vocab]
def vocab_parallel_embedding(ids, weight_shard, vocab_start, group):
    """Each rank owns rows [vocab_start, vocab_start + V/t) of the table; others contribute zeros."""
    local = ids - vocab_start
    mask = (local < 0) | (local >= weight_shard.shape[0])
    out = F.embedding(local.masked_fill(mask, 0), weight_shard) * (~mask).unsqueeze(-1)
    return ReduceFromTP.apply(out, group)  # 1 all-reduce of b*s*h in forward


def vocab_parallel_cross_entropy(logits_shard, target, vocab_start, group):
    """Mean cross-entropy over logits split along the vocabulary, without gathering them:
    three all-reduces of b*s numbers (max, sum of exp, target logit) instead of b*s*V logits."""
    local_max = logits_shard.detach().amax(-1)
    gmax = _all_reduce(local_max.clone(), group, "fwd", dist.ReduceOp.MAX)  # shift: no gradient needed
    z = logits_shard - gmax.unsqueeze(-1)
    sum_exp = ReduceFromTP.apply(z.exp().sum(-1), group)
    local_t = target - vocab_start
    mask = (local_t < 0) | (local_t >= logits_shard.shape[-1])
    picked = z.gather(-1, local_t.clamp(0, logits_shard.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
    target_logit = ReduceFromTP.apply(picked * (~mask), group)
    return (sum_exp.log() - target_logit).mean()
# --8<-- [end:vocab]


def comm_formula(layers: int, b: int, s: int, h: int, with_vocab: bool) -> list[tuple[str, str, int]]:
    """The all-reduces the page derives, in issue order per phase: per block 2 in forward (g) and 2 in
    backward (f), each of b*s*h elements; embedding 1 forward b*s*h; cross-entropy 3 forward of b*s;
    the column-parallel LM head's f adds 1 backward of b*s*h."""
    fwd, bwd = [], []
    if with_vocab:
        fwd.append(b * s * h)
    fwd += [b * s * h] * (2 * layers)
    bwd += [b * s * h] * (2 * layers)
    if with_vocab:
        fwd += [b * s] * 3
        bwd += [b * s * h]
    return [("all_reduce", "fwd", n) for n in fwd] + [("all_reduce", "bwd", n) for n in bwd]


def _maxdiff(a, b):
    return float((a - b).abs().max())


def worker_tp(rank, world, b=2, s=8, h=16, heads=4, ffn=64, vocab=32, layers=2):
    """On 4 ranks: TP groups {0,1},{2,3} (t=2) and {0,1,2,3} (t=4). A tiny LM (vocab-parallel embedding,
    `layers` parallel blocks, column-parallel LM head, vocab-parallel cross-entropy) against the unsplit one."""
    torch.set_default_dtype(torch.float64)  # float64: differences are pure reassociation, ~1e-15
    groups = {2: [dist.new_group([0, 1]), dist.new_group([2, 3])], 4: [dist.new_group([0, 1, 2, 3])]}
    results = {}
    for t in (2, 4):
        group = groups[t][rank // t] if t == 2 else groups[4][0]
        r = dist.get_rank(group)
        torch.manual_seed(0)
        emb = nn.Embedding(vocab, h)
        blocks = [Block(h, heads, ffn) for _ in range(layers)]
        head = nn.Linear(h, vocab, bias=False)
        ids = torch.randint(0, vocab, (b, s))
        target = torch.randint(0, vocab, (b, s))
        # reference, one process
        x = emb(ids)
        for blk in blocks:
            x = blk(x)
        loss_ref = F.cross_entropy(head(x).reshape(-1, vocab), target.reshape(-1))
        loss_ref.backward()
        # tensor parallel
        per = vocab // t
        emb_w = nn.Parameter(shard(emb.weight.data, 0, r, t))
        head_w = nn.Parameter(shard(head.weight.data, 0, r, t))
        pblocks = [ParallelBlock(blk, group) for blk in blocks]
        for blk in blocks:  # the replicated LayerNorms/biases are shared modules: clear their reference grads
            for p in (*blk.ln1.parameters(), *blk.ln2.parameters(), blk.o.bias, blk.fc2.bias):
                p.ref_grad = p.grad.clone()
                p.grad = None
        COMM_LOG.clear()
        x = vocab_parallel_embedding(ids, emb_w, r * per, group)
        for pb in pblocks:
            x = pb(x)
        logits = F.linear(CopyToTP.apply(x, group), head_w)  # column-parallel LM head: (b, s, V/t)
        loss = vocab_parallel_cross_entropy(logits, target, r * per, group)
        n_fwd = len(COMM_LOG)
        loss.backward()
        out = {"loss": float(loss.detach()), "loss_ref": float(loss_ref.detach()), "log": list(COMM_LOG), "n_fwd": n_fwd,
               "formula": comm_formula(layers, b, s, h, True)}
        diffs = {"embedding": _maxdiff(emb_w.grad, shard(emb.weight.grad, 0, r, t)),
                 "lm_head": _maxdiff(head_w.grad, shard(head.weight.grad, 0, r, t))}
        for i, (blk, pb) in enumerate(zip(blocks, pblocks)):
            for name, mine, full, dim in (("q", pb.wq, blk.q.weight, 0), ("k", pb.wk, blk.k.weight, 0),
                                          ("v", pb.wv, blk.v.weight, 0), ("o", pb.wo, blk.o.weight, 1),
                                          ("fc1", pb.w1, blk.fc1.weight, 0), ("fc2", pb.w2, blk.fc2.weight, 1),
                                          ("bq", pb.bq, blk.q.bias, 0), ("b1", pb.b1, blk.fc1.bias, 0)):
                diffs[f"L{i}.{name}"] = _maxdiff(mine.grad, shard(full.grad, dim, r, t))
            for j, p in enumerate((*blk.ln1.parameters(), *blk.ln2.parameters(), blk.o.bias, blk.fc2.bias)):
                diffs[f"L{i}.replicated{j}"] = _maxdiff(p.grad, p.ref_grad)
        out["max_grad_diff"] = max(diffs.values())
        out["grad_diffs"] = diffs
        results[t] = out
    return results


def sharded_attention_heads_ok(heads: int, kv_heads: int, t: int) -> str:
    """How Megatron places GQA heads on t ranks: query heads must divide; KV heads are split if they divide,
    replicated (t / kv_heads copies each) if t is a multiple of kv_heads."""
    if heads % t:
        return "impossible"
    if kv_heads % t == 0:
        return "split"
    return "replicate" if t % kv_heads == 0 else "impossible"


def tp_allreduce_bytes_per_layer(b: int, s: int, h: int, t: int, elem_bytes: int = 2, recompute: bool = False) -> float:
    """Bytes each rank sends per transformer layer per training step with ring all-reduces:
    4 all-reduces (6 with full recomputation, which repeats the 2 forward ones) of b*s*h elements."""
    n = 6 if recompute else 4
    return n * 2 * (t - 1) / t * b * s * h * elem_bytes



# --8<-- [start:ulysses]
def ulysses_attention(q, k, v, group):
    """DeepSpeed-Ulysses on one rank. In: q, k, v of shape (s/t, H, d), this rank's sequence chunk, all heads.
    all-to-all -> (s, H/t, d): full sequence, a slice of heads; attend; all-to-all back. 4 all-to-alls."""
    t = dist.get_world_size(group)

    def seq_to_heads(x):  # (s/t, H, d) -> (s, H/t, d)
        sl, H, d = x.shape
        send = x.reshape(sl, t, H // t, d).permute(1, 0, 2, 3).contiguous()  # block j goes to rank j
        recv = torch.empty_like(send)
        COMM_LOG.append(("all_to_all", "fwd", send.numel()))
        dist.all_to_all_single(recv, send, group=group)
        return recv.reshape(t * sl, H // t, d)  # block i came from rank i = sequence chunk i

    def heads_to_seq(x):  # (s, H/t, d) -> (s/t, H, d)
        s, hl, d = x.shape
        send = x.reshape(t, s // t, hl, d).contiguous()  # sequence chunk j goes back to rank j
        recv = torch.empty_like(send)
        COMM_LOG.append(("all_to_all", "fwd", send.numel()))
        dist.all_to_all_single(recv, send, group=group)
        return recv.permute(1, 0, 2, 3).reshape(s // t, t * hl, d)  # block i = head group i

    qh, kh, vh = (seq_to_heads(x).transpose(0, 1) for x in (q, k, v))  # (H/t, s, d)
    out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    return heads_to_seq(out.transpose(0, 1))
# --8<-- [end:ulysses]


# --8<-- [start:ring]
def ring_attention(q, k, v, group):
    """Causal ring attention on one rank. In: (H, s/t, d) chunks; chunk index = rank. KV blocks travel
    around the ring; each arriving block is merged with the online-softmax recurrence (m, l, acc)."""
    t, r = dist.get_world_size(group), dist.get_rank(group)
    ranks = dist.get_process_group_ranks(group)
    right, left = ranks[(r + 1) % t], ranks[(r - 1) % t]
    scale = q.shape[-1] ** -0.5
    m = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype)
    acc = torch.zeros_like(q)
    kv = torch.stack([k, v])
    sent = 0
    for step in range(t):
        src = (r - step) % t  # which sequence chunk this KV block holds
        if src <= r:  # causal: blocks from later chunks are skipped entirely
            sc = (q @ kv[0].transpose(-1, -2)) * scale
            if src == r:  # diagonal block: causal mask inside it
                sc = sc.masked_fill(torch.ones_like(sc, dtype=torch.bool).triu(1), -math.inf)
            m_new = torch.maximum(m, sc.amax(-1))
            p = torch.exp(sc - m_new.unsqueeze(-1))
            corr = torch.exp(m - m_new)
            l = l * corr + p.sum(-1)
            acc = acc * corr.unsqueeze(-1) + p @ kv[1]
            m = m_new
        if step < t - 1:  # pass the block on (a real kernel overlaps this with the math above)
            nxt = torch.empty_like(kv)
            req = dist.isend(kv.contiguous(), right, group=group)
            dist.recv(nxt, left, group=group)
            req.wait()
            sent += kv.numel() * kv.element_size()
            kv = nxt
    return acc / l.unsqueeze(-1), sent
# --8<-- [end:ring]


def worker_cp(rank, world, s=16, H=4, d=8):
    """Ulysses and ring attention on context-parallel groups of 2 and 4 ranks against full causal attention."""
    torch.set_default_dtype(torch.float64)
    groups = {2: [dist.new_group([0, 1]), dist.new_group([2, 3])], 4: [dist.new_group([0, 1, 2, 3])]}
    torch.manual_seed(1)
    q, k, v = (torch.randn(s, H, d) for _ in range(3))
    full = F.scaled_dot_product_attention(*(x.transpose(0, 1) for x in (q, k, v)), is_causal=True).transpose(0, 1)
    res = {}
    for t in (2, 4):
        group = groups[t][rank // t] if t == 2 else groups[4][0]
        r = dist.get_rank(group)
        sl = slice(r * s // t, (r + 1) * s // t)
        COMM_LOG.clear()
        uly = ulysses_attention(q[sl], k[sl], v[sl], group)
        a2a = list(COMM_LOG)
        ring, sent = ring_attention(q[sl].transpose(0, 1), k[sl].transpose(0, 1), v[sl].transpose(0, 1), group)
        res[t] = {"ulysses_diff": _maxdiff(uly, full[sl]), "ring_diff": _maxdiff(ring.transpose(0, 1), full[sl]),
                  "a2a": a2a, "ring_bytes_sent": sent}
    return res


def worker_tp_cp(rank, world):
    """Both experiments in one launch (process start-up dominates on CPU)."""
    return {"tp": worker_tp(rank, world), "cp": worker_cp(rank, world)}


def ring_attention_bytes(s: int, heads: int, d: int, t: int, elem_bytes: int) -> int:
    """Bytes each rank sends in one causal ring-attention forward: t-1 hops of its K and V block."""
    return (t - 1) * 2 * (s // t) * heads * d * elem_bytes


def ulysses_a2a_elems(s: int, heads: int, d: int, t: int) -> int:
    """Elements each rank hands to each of the 4 all-to-alls (q, k, v in; output back)."""
    return (s // t) * heads * d
