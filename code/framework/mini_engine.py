"""A small LLM engine assembled from the chapter's parts (docs/framework/mini-engine.md).

Real model arithmetic (a Llama-style decoder whose weights are read from a `transformers` model), its
own paged KV cache (block tables and chained-hash prefix caching from block_manager.py), a token-budget
scheduler with chunked prefill and preemption by recomputation (the rules of vLLM V1's scheduler), paged
attention over block tables, the batched sampler of sampler.py and an optional per-request token mask
(the hook structured output uses). Torch only; CPU by default, or on a GPU with `device=` (sampler.py stays on
the CPU; a step whose rows are all plain greedy takes the argmax on the device instead).
tests/test_framework_mini_engine.py asserts that every request gets exactly the tokens `generate()` gives it
when it runs alone; bench/experiments/mini_engine.py measures it on an H200.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from block_manager import BlockManager, OutOfBlocks, block_hash, paged_attention
from sampler import EPS, BatchState, SamplingParams, sample


# --8<-- [start:cache]
class PrefixCachingKV(BlockManager):
    """block_manager.BlockManager with one change an engine needs: a full block enters the prefix cache
    when the step that writes its KV is scheduled (vLLM V1 caches blocks up to num_computed + num_new
    tokens), not when it is allocated, so a request can never hit a block nobody is computing."""

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size, prefix_caching=True)
        self.chain: dict[str, list[bytes]] = {}  # seq -> hashes of its blocks already in the cache

    def _register(self, seq, i):  # BlockManager calls this at allocate/append time: defer to commit()
        pass

    def allocate(self, seq, prompt) -> int:
        hit = super().allocate(seq, prompt)  # shares cached blocks, takes free ones for the rest
        chain, bs = [], self.block_size
        for i in range(hit // bs):
            chain.append(block_hash(chain[-1] if chain else None, tuple(prompt[i * bs:(i + 1) * bs])))
        self.chain[seq] = chain
        return hit

    def commit(self, seq, num_tokens: int) -> None:
        """The KV of the first num_tokens tokens of seq is written by the end of this step."""
        chain, bs, toks = self.chain[seq], self.block_size, self.tokens[seq]
        for i in range(len(chain), num_tokens // bs):
            h = block_hash(chain[-1] if chain else None, tuple(toks[i * bs:(i + 1) * bs]))
            b = self.tables[seq][i]
            if h not in self.cached and b not in self.hash_of:
                self.cached[h], self.hash_of[b] = b, h
            chain.append(h)

    def reserve(self, seq, tokens: list[int]) -> None:
        """Slots for every token of `tokens` (the sequence so far); raises OutOfBlocks."""
        for t in tokens[len(self.tokens[seq]):]:
            if self.append(seq, t) is not None:
                raise NotImplementedError("copy-on-write happens only for forked sequences")

    def free_seq(self, seq) -> None:
        super().free_seq(seq)  # its cached blocks stay findable until evicted (LRU)
        del self.chain[seq]
# --8<-- [end:cache]


# --8<-- [start:attention]
def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_table: list[int], ctx: int, slots: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of n queries [n, heads, d], the LAST n positions of a context of ctx tokens (a prefill
    chunk), over a paged cache [num_blocks, block_size, kv_heads, d]: gather the rows the block table
    names, as a varlen kernel with a block table reads them, then a causal softmax. `slots`: those rows,
    if the caller already computed them (on the cache's device)."""
    n, heads, d = q.shape
    bs, kv_heads = k_cache.shape[1], k_cache.shape[2]
    if slots is None:
        slots = context_slots(block_table, bs, ctx).to(k_cache.device)
    k = k_cache.view(-1, kv_heads, d)[slots].repeat_interleave(heads // kv_heads, dim=1)  # [ctx, heads, d]
    v = v_cache.view(-1, kv_heads, d)[slots].repeat_interleave(heads // kv_heads, dim=1)
    logits = torch.einsum("qhd,khd->hqk", q, k) * d**-0.5
    ar = torch.arange(ctx, device=q.device)
    future = ar[None, :] > ar[ctx - n:, None]  # key after the query
    probs = logits.masked_fill(future, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def context_slots(block_table: list[int], block_size: int, ctx: int) -> torch.Tensor:
    """Flat cache rows of the first ctx tokens of a sequence, in order (CPU)."""
    return (torch.tensor(block_table)[:, None] * block_size + torch.arange(block_size)).flatten()[:ctx]
# --8<-- [end:attention]


def batched_attention_plan(seqs, block_size: int, device) -> tuple[torch.Tensor, ...]:
    """The gathers of one padded attention call for the whole step (attention="batched"), built once per
    forward on the CPU and copied to the device: kv_idx [B, L] cache rows of each context (padded with 0),
    q_idx [B, nmax] rows of each request's queries (padded), mask [B, nmax, L] (key valid and not after the
    query), keep [T] the flat positions of the real query rows in [B * nmax], in the step's row order."""
    ctx = torch.tensor([c for _, _, _, c in seqs])
    n = torch.tensor([k for _, k, _, _ in seqs])
    start = torch.tensor([s for s, _, _, _ in seqs])
    kv_idx = torch.nn.utils.rnn.pad_sequence([context_slots(t, block_size, c) for _, _, t, c in seqs],
                                             batch_first=True)
    L, nmax = kv_idx.shape[1], int(n.max())
    j = torch.arange(nmax)
    q_idx = start[:, None] + torch.minimum(j[None, :], n[:, None] - 1)  # padding repeats the last row
    qpos = (ctx - n)[:, None] + j[None, :]
    key = torch.arange(L)
    mask = (key[None, None, :] < ctx[:, None, None]) & (key[None, None, :] <= qpos[:, :, None])
    keep = (j[None, :] < n[:, None]).flatten().nonzero().flatten()
    return tuple(t.to(device) for t in (kv_idx, q_idx, mask, keep))


# --8<-- [start:model]
class PagedLlama:
    """A Llama decoder over a FLAT batch: the tokens of every scheduled request (prefill chunks and
    decode tokens alike) go through the linear layers together; only attention is per request, over its
    own block table. Weights are the transformers model's own tensors; KV lives in our paged caches."""

    def __init__(self, hf_model, num_blocks: int, block_size: int, device=None, dtype=None,
                 attention: str = "per_request"):
        c = hf_model.config
        dev = torch.device(device) if device is not None else hf_model.get_input_embeddings().weight.device
        dt = dtype or hf_model.get_input_embeddings().weight.dtype
        self.device, self.block_size, self.attention = dev, block_size, attention
        assert attention in ("per_request", "batched"), attention
        self.w = {k: v.detach().to(dev, dt) for k, v in hf_model.state_dict().items()}  # no copy if already there
        self.w["lm_head.weight"] = hf_model.get_output_embeddings().weight.detach().to(dev, dt)
        self.layers, self.heads, self.kv_heads = c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads
        self.d = getattr(c, "head_dim", None) or c.hidden_size // self.heads
        self.eps = c.rms_norm_eps
        self.inv_freq = hf_model.model.rotary_emb.inv_freq.float().to(dev)  # RoPE angles in float32, as transformers
        shape = (num_blocks, block_size, self.kv_heads, self.d)
        self.k_cache = [torch.zeros(shape, dtype=dt, device=dev) for _ in range(self.layers)]
        self.v_cache = [torch.zeros(shape, dtype=dt, device=dev) for _ in range(self.layers)]

    def rms(self, x, weight):  # LlamaRMSNorm: normalise in float32, scale in the model's dtype
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def rope(self, x, pos):  # x [T, heads, d], rotate_half convention
        ang = pos[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        cos, sin = emb.cos().to(x.dtype)[:, None, :], emb.sin().to(x.dtype)[:, None, :]
        x1, x2 = x[..., :self.d // 2], x[..., self.d // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    @torch.no_grad()
    def forward(self, ids, pos, slots, seqs) -> torch.Tensor:
        """ids, pos, slots [T]: every token of the step, its position and the flat cache slot its KV goes
        to (-1: already in the cache). seqs: per request (first row, rows, block table, context length
        after this step). Returns the logits of each request's last row, [len(seqs), vocab]."""
        w, T, H, KV, d, dev = self.w, len(ids), self.heads, self.kv_heads, self.d, self.device
        widx = (slots >= 0).nonzero().flatten()  # rows whose KV is written; index on the host, copy once
        ids, pos, dst, widx = (t.to(dev) for t in (ids, pos, slots[widx], widx))
        if self.attention == "batched":
            kv_idx, q_idx, amask, keep = batched_attention_plan(seqs, self.block_size, dev)
        else:
            ctx_slots = torch.cat([context_slots(t, self.block_size, c) for _, _, t, c in seqs]).to(dev)
            ctx_slots = ctx_slots.split([c for _, _, _, c in seqs])
        x = w["model.embed_tokens.weight"][ids]
        for l in range(self.layers):
            p = f"model.layers.{l}."
            h = self.rms(x, w[p + "input_layernorm.weight"])
            q = self.rope(F.linear(h, w[p + "self_attn.q_proj.weight"]).view(T, H, d), pos)
            k = self.rope(F.linear(h, w[p + "self_attn.k_proj.weight"]).view(T, KV, d), pos)
            v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(T, KV, d)
            kc, vc = self.k_cache[l], self.v_cache[l]
            kc.view(-1, KV, d)[dst] = k[widx]  # reshape_and_cache: all KV of the step first
            vc.view(-1, KV, d)[dst] = v[widx]
            if self.attention == "batched":  # one padded SDPA call for every request of the step
                g = H // KV
                kb = kc.view(-1, KV, d)[kv_idx].repeat_interleave(g, dim=2).transpose(1, 2)  # [B, H, L, d]
                vb = vc.view(-1, KV, d)[kv_idx].repeat_interleave(g, dim=2).transpose(1, 2)
                o = F.scaled_dot_product_attention(q[q_idx].transpose(1, 2), kb, vb, attn_mask=amask[:, None])
                out = o.transpose(1, 2).reshape(-1, H, d)[keep]  # [T, H, d], the step's row order
            else:
                out = torch.empty_like(q)
                for (start, n, table, ctx), cs in zip(seqs, ctx_slots):
                    if n == 1 and dev.type == "cpu":  # decode: one query, the PagedAttention loop over blocks
                        out[start] = paged_attention(q[start], kc, vc, table, ctx)
                    else:  # prefill chunk (or decode on a GPU): n queries, causal over the gathered context
                        out[start:start + n] = paged_prefill_attention(q[start:start + n], kc, vc, table, ctx, cs)
            x = x + F.linear(out.reshape(T, H * d), w[p + "self_attn.o_proj.weight"])
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            gate, up = F.linear(h, w[p + "mlp.gate_proj.weight"]), F.linear(h, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        last = torch.tensor([start + n - 1 for start, n, _, _ in seqs], device=dev)
        return F.linear(self.rms(x[last], w["model.norm.weight"]), w["lm_head.weight"])
# --8<-- [end:model]


# --8<-- [start:request]
@dataclass
class Request:
    rid: str
    prompt: list[int]
    max_tokens: int
    params: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.0))
    arrival: int = 0  # engine step at which the request arrives
    allowed: Callable[[list[int]], torch.Tensor] | None = None  # output so far -> [V] bool (grammar)
    output: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose KV is in the cache (or written by the step being run)
    cached: int = 0  # tokens found in the prefix cache at its last admission
    state: BatchState | None = None  # its sampler row: penalties' counts and its own generator

    @property
    def tokens(self) -> list[int]:  # prompt + output: what a recomputation has to prefill again
        return self.prompt + self.output


def _plain_greedy(sp: SamplingParams) -> bool:
    """Greedy with no penalty: the token is the argmax of the raw logits (what sample() would pick)."""
    return (sp.temperature < EPS and sp.repetition_penalty == 1.0 and sp.presence_penalty == 0.0
            and sp.frequency_penalty == 0.0 and sp.n == 1)


def stack_states(states: list[BatchState]) -> BatchState:
    """One BatchState for the rows sampled this step, from each request's own one-row state: tensors
    are concatenated, generators are shared objects, so a seeded stream continues across steps."""
    st = BatchState.__new__(BatchState)
    st.vocab = states[0].vocab
    for name in ("greedy", "temp", "top_k", "use_top_p", "one_minus_p", "min_p", "rep", "presence",
                 "frequency", "prompt_mask", "out_counts", "unseeded"):
        setattr(st, name, torch.cat([getattr(s, name) for s in states]))
    st.generators = [(slice(i, i + 1), g) for i, s in enumerate(states) for _, g in s.generators]
    return st
# --8<-- [end:request]


class MiniEngine:
    def __init__(self, hf_model, num_blocks: int = 64, block_size: int = 4, max_num_batched_tokens: int = 64,
                 max_num_seqs: int = 16, eos_token_id: int | None = None, device=None, dtype=None,
                 attention: str = "per_request"):
        self.kv = PrefixCachingKV(num_blocks, block_size)
        self.model = PagedLlama(hf_model, num_blocks, block_size, device, dtype, attention)
        self.vocab = hf_model.config.vocab_size
        self.budget, self.max_num_seqs, self.eos = max_num_batched_tokens, max_num_seqs, eos_token_id
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished: dict[str, Request] = {}
        self.steps = 0
        self.stats = {"forward_tokens": 0, "prefix_hit_tokens": 0, "preemptions": 0, "recomputed_tokens": 0,
                      "mixed_steps": 0, "max_step_tokens": 0, "partial_prefill_rows": 0}
        self.preempted: list[tuple[str, int]] = []  # (request, tokens it had generated when preempted)

    def add_request(self, r: Request) -> None:
        bs = self.kv.block_size
        if -(-(len(r.prompt) + r.max_tokens) // bs) > len(self.kv.ref):
            raise ValueError(f"{r.rid} can never fit in the KV cache")
        assert r.params.n == 1, "n > 1 would fork the block table (BlockManager.fork); not wired here"
        r.state = BatchState([(r.prompt, r.params)], self.vocab)
        self.waiting.append(r)

    # --8<-- [start:schedule]
    def schedule(self) -> list[tuple[Request, int]]:
        """vLLM V1's rule: every request owes len(tokens) - num_computed tokens (a prompt, the rest of a
        chunked prompt, or the one new decode token); pay running requests first, then admit waiting ones
        first-come first-served, all within one token budget. No KV slot for a decode token: preempt the
        latest-admitted running request (free its blocks, num_computed = 0, back to the FRONT of the queue)."""
        budget, plan, preempted = self.budget, [], False
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            try:
                self.kv.reserve(r.rid, r.tokens)  # a decode token may need a new block
            except OutOfBlocks:
                victim = self.running.pop()  # lowest priority; may be r itself, which ends the loop
                self.kv.free_seq(victim.rid)
                self.stats["recomputed_tokens"] += victim.num_computed
                victim.num_computed, preempted = 0, True
                self.stats["preemptions"] += 1
                self.preempted.append((victim.rid, len(victim.output)))
                self.waiting.appendleft(victim)
                continue
            n = min(len(r.tokens) - r.num_computed, budget)
            plan.append((r, n))
            self.kv.commit(r.rid, r.num_computed + n)  # blocks this step fills: findable from now on
            budget -= n
            i += 1
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]
            try:
                hit = self.kv.allocate(r.rid, r.tokens)  # blocks for the whole prompt; cached ones shared
            except OutOfBlocks:
                break  # first-come first-served: nobody overtakes the head of the queue
            self.waiting.popleft()
            r.cached = hit
            r.num_computed = min(hit, len(r.tokens) - 1)  # a full hit still recomputes the last token
            self.stats["prefix_hit_tokens"] += r.num_computed
            n = min(len(r.tokens) - r.num_computed, budget)
            self.running.append(r)
            plan.append((r, n))
            self.kv.commit(r.rid, r.num_computed + n)  # a later admission in this same step may hit them
            budget -= n
        return plan
    # --8<-- [end:schedule]

    # --8<-- [start:step]
    def step(self) -> None:
        plan = self.schedule()
        self.steps += 1
        if not plan:
            return
        ids, pos, slots, seqs = [], [], [], []
        for r, n in plan:  # flatten: one row per scheduled token, requests one after another
            first = r.num_computed
            seqs.append((len(ids), n, self.kv.tables[r.rid], first + n))
            ids += r.tokens[first:first + n]
            pos += range(first, first + n)
            slots += [self.kv.slot(r.rid, p) if p >= r.cached else -1 for p in range(first, first + n)]
        logits = self.model.forward(torch.tensor(ids), torch.tensor(pos), torch.tensor(slots), seqs)
        self.stats["forward_tokens"] += len(ids)
        self.stats["max_step_tokens"] = max(self.stats["max_step_tokens"], len(ids))
        self.stats["mixed_steps"] += any(n == 1 for _, n in plan) and any(n > 1 for _, n in plan)
        done = []  # rows whose step reached the end of the sequence sample a token; a mid-prompt chunk does not
        for row, (r, n) in enumerate(plan):
            r.num_computed += n
            self.stats["partial_prefill_rows"] += r.num_computed < len(r.tokens)
            if r.num_computed == len(r.tokens):
                done.append((row, r))
        if not done:
            return
        rows = torch.tensor([row for row, _ in done])
        allowed = None
        if any(r.allowed for _, r in done):  # structured output: mask rows before the sampler
            allowed = torch.stack([r.allowed(r.output) if r.allowed else torch.ones(self.vocab, dtype=torch.bool)
                                   for _, r in done])
        if allowed is None and all(_plain_greedy(r.params) for _, r in done):
            # vLLM's all-greedy shortcut: no temperature, penalty or mask changes the argmax of the raw
            # logits, so take it where the logits are (one small copy instead of [R, V] to the host)
            tokens = logits[rows.to(logits.device)].float().argmax(-1).cpu()
        else:
            tokens, _ = sample(logits[rows.to(logits.device)].float().cpu(),  # the sampler runs on the CPU
                               stack_states([r.state for _, r in done]), allowed)
        for (_, r), t in zip(done, tokens.tolist()):
            r.state.record(torch.tensor([t]))
            r.output.append(t)
            if t == self.eos or len(r.output) >= r.max_tokens:
                self.running.remove(r)
                self.kv.free_seq(r.rid)  # its full blocks stay in the prefix cache until evicted
                self.finished[r.rid] = r
    # --8<-- [end:step]

    # --8<-- [start:run]
    def run(self, requests: list[Request], max_steps: int = 10_000) -> dict[str, list[int]]:
        pending = sorted(requests, key=lambda r: r.arrival)
        while pending or self.waiting or self.running:
            while pending and pending[0].arrival <= self.steps:  # requests arriving at this step
                self.add_request(pending.pop(0))
            self.step()
            assert self.steps < max_steps, "no progress"
        return {r.rid: r.output for r in requests}
    # --8<-- [end:run]
