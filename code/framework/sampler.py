"""A serving engine's sampler (docs/framework/engine-sampling.md, notebooks/framework/batched-sampling-lab.ipynb).

One batch holds rows of many requests, each with its own temperature, top-k, top-p, min-p, repetition /
presence / frequency penalties and seed; a request with n > 1 owns n consecutive rows that share its
prompt. Every step is a handful of tensor operations over the whole batch (no Python loop over requests),
except the draw of the random numbers of seeded requests, which needs one call per generator (as in
vLLM's `random_sample`). The single-request strategies themselves are in code/algorithm/decoding.py.

The order of the steps follows transformers' `generate` (penalties, temperature, top-k, top-p, min-p),
so that each request of a batch gets exactly the tokens `generate` gives it when it runs alone with the
same seed: tests/test_framework_sampler.py and the lab assert it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

NEG_INF = float("-inf")
EPS = 1e-5          # vLLM's _SAMPLING_EPS: a temperature below it means greedy


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0            # < EPS: greedy
    top_k: int = 0                      # 0: off
    top_p: float = 1.0                  # 1.0: off
    min_p: float = 0.0                  # 0.0: off
    repetition_penalty: float = 1.0     # CTRL, on prompt + output tokens
    presence_penalty: float = 0.0       # OpenAI, on output tokens
    frequency_penalty: float = 0.0      # OpenAI, on output tokens
    seed: int | None = None             # own torch.Generator when set
    n: int = 1                          # answers sharing this prompt


# --8<-- [start:state]
class BatchState:
    """Per-row sampling state of one batch: one tensor per parameter ([R] for R rows), the prompt's
    token set and the output token counts ([R, V]), and the generators of seeded requests.
    Request r with n_r answers owns rows [start_r, start_r + n_r)."""

    def __init__(self, requests: list[tuple[list[int], SamplingParams]], vocab: int):
        rows = [(prompt, sp) for prompt, sp in requests for _ in range(sp.n)]
        f32 = dict(dtype=torch.float32)
        self.vocab = vocab
        self.greedy = torch.tensor([sp.temperature < EPS for _, sp in rows])
        self.temp = torch.tensor([1.0 if sp.temperature < EPS else sp.temperature for _, sp in rows], **f32)
        self.top_k = torch.tensor([sp.top_k if 0 < sp.top_k < vocab else vocab for _, sp in rows])
        self.use_top_p = torch.tensor([sp.top_p < 1.0 for _, sp in rows])
        # 1 - p rounded once from double, as transformers compares cumsum <= (1 - top_p) with a Python float
        self.one_minus_p = torch.tensor([1.0 - sp.top_p for _, sp in rows], **f32)
        self.min_p = torch.tensor([sp.min_p for _, sp in rows], **f32)
        self.rep = torch.tensor([sp.repetition_penalty for _, sp in rows], **f32)
        self.presence = torch.tensor([sp.presence_penalty for _, sp in rows], **f32)
        self.frequency = torch.tensor([sp.frequency_penalty for _, sp in rows], **f32)
        # prompt token set: scatter into V + 1 columns, padding id V lands in the spare column (vLLM's trick)
        plen = max(len(p) for p, _ in rows)
        padded = torch.tensor([p + [vocab] * (plen - len(p)) for p, _ in rows])
        hits = torch.zeros(len(rows), vocab + 1).scatter_(1, padded, 1.0)
        self.prompt_mask = hits[:, :vocab] > 0
        self.out_counts = torch.zeros(len(rows), vocab, **f32)
        self.generators: list[tuple[slice, torch.Generator]] = []
        start = 0
        for _, sp in requests:
            if sp.seed is not None and sp.temperature >= EPS:
                self.generators.append((slice(start, start + sp.n), torch.Generator().manual_seed(sp.seed)))
            start += sp.n
        self.unseeded = torch.tensor([sp.seed is None for _, sp in rows])

    def record(self, tokens: torch.Tensor):
        """Count the sampled tokens: one scatter_add for the whole batch."""
        self.out_counts.scatter_add_(1, tokens[:, None], torch.ones(len(tokens), 1))
# --8<-- [end:state]


# --8<-- [start:penalties]
def apply_penalties(logits, st: BatchState):
    """Repetition penalty on every token seen in prompt or output (divide positive logits by theta,
    multiply negative ones), then presence and frequency on output tokens. A row whose penalty is
    neutral (theta = 1, alpha = 0) is left bit-for-bit unchanged: x * 1, x / 1 and x - 0 are exact."""
    seen = st.prompt_mask | (st.out_counts > 0)
    theta = torch.where(seen, st.rep[:, None], torch.ones(()))
    logits = torch.where(logits < 0, logits * theta, logits / theta)
    return (logits - st.frequency[:, None] * st.out_counts
            - st.presence[:, None] * (st.out_counts > 0).to(logits.dtype))
# --8<-- [end:penalties]


# --8<-- [start:topk_topp]
def top_k_top_p(logits, st: BatchState):
    """Top-k and top-p for every row with ONE sort (vLLM's apply_top_k_top_p_pytorch). In ascending
    order the k-th largest value sits at column V - k, so top-k is a gather and a compare per row;
    top-p needs the same order for its cumulative sum, so it reuses the sort; one scatter undoes it."""
    sorted_logits, order = logits.sort(dim=-1, descending=False)
    kth = sorted_logits.gather(1, (st.vocab - st.top_k)[:, None])        # k-th largest of each row
    sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, NEG_INF)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = (cum <= st.one_minus_p[:, None]) & st.use_top_p[:, None]      # tail whose mass <= 1 - p
    drop[:, -1] = False                                                  # keep at least the top token
    sorted_logits = sorted_logits.masked_fill(drop, NEG_INF)
    return logits.scatter(1, order, sorted_logits)


def min_p(logits, st: BatchState):
    """Keep tokens with probability >= min_p x the row's top probability (min_p = 0 keeps all)."""
    probs = logits.softmax(-1)
    return logits.masked_fill(probs < st.min_p[:, None] * probs.amax(-1, keepdim=True), NEG_INF)
# --8<-- [end:topk_topp]


# --8<-- [start:sample]
def sample(logits, st: BatchState, allowed: torch.Tensor | None = None, generator=None):
    """One sampling step for the whole batch. `allowed` ([R, V] bool) is a grammar mask applied first,
    as vLLM applies the structured-output bitmask before the sampler. Returns (tokens, scores), where
    scores are the processed logits each row sampled from (greedy rows: after the penalties only)."""
    if allowed is not None:
        logits = logits.masked_fill(~allowed, NEG_INF)
    logits = apply_penalties(logits, st)
    greedy_tokens = logits.argmax(-1)
    warped = min_p(top_k_top_p(logits / st.temp[:, None], st), st)
    probs = warped.softmax(-1)
    # exponential race: argmax p / E with E ~ Exp(1) (what torch.multinomial does inside, without its sync)
    q = torch.empty_like(probs)
    if bool(st.unseeded.any()):
        q.exponential_(generator=generator)
    for rows, gen in st.generators:                 # one call per seeded request, not per token
        q[rows].exponential_(generator=gen)
    tokens = torch.where(st.greedy, greedy_tokens, (probs / q).argmax(-1))
    scores = torch.where(st.greedy[:, None], logits, warped)
    return tokens, scores
# --8<-- [end:sample]


# --8<-- [start:engine]
@torch.no_grad()
def generate_batch(model, requests: list[tuple[list[int], SamplingParams]], max_new_tokens: int):
    """Serve a batch of requests to completion (no EOS; fixed length): prefill each distinct prompt ONCE
    (left-padded, one forward), copy its KV rows to its n answers, then decode all rows together, one
    forward of R tokens per step. Returns per request a list of n token lists, the per-step scores, and
    the number of token positions the model computed."""
    vocab = model.config.vocab_size
    st = BatchState(requests, vocab)
    prompts = [p for p, _ in requests]
    lens = torch.tensor([len(p) for p in prompts])
    L = int(lens.max())
    ids = torch.tensor([[0] * (L - len(p)) + p for p in prompts])
    mask = (torch.arange(L)[None, :] >= (L - lens)[:, None]).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    computed = {"prefill": ids.numel(), "prefill_real": int(lens.sum()), "decode": 0}
    # n answers of request r share its prompt: repeat its row of KV, logits and mask n times
    row_req = torch.repeat_interleave(torch.arange(len(requests)), torch.tensor([sp.n for _, sp in requests]))
    cache = out.past_key_values
    cache.reorder_cache(row_req)
    logits, mask, next_pos = out.logits[row_req, -1].float(), mask[row_req], lens[row_req]
    tokens_out, history = [], []
    for step in range(max_new_tokens):
        tok, scores = sample(logits, st)
        st.record(tok)
        tokens_out.append(tok)
        history.append(scores)
        if step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones(len(tok), 1, dtype=mask.dtype)], dim=1)
        out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None] + step,
                    past_key_values=cache, use_cache=True)
        computed["decode"] += len(tok)
        logits = out.logits[:, -1].float()
    gen = torch.stack(tokens_out, dim=1)
    per_request, start = [], 0
    for _, sp in requests:
        per_request.append(gen[start:start + sp.n].tolist())
        start += sp.n
    return per_request, history, computed
# --8<-- [end:engine]


def forward_tokens(prompt_lens: list[int], ns: list[int], max_new_tokens: int, share_prompt: bool) -> int:
    """Token positions the model computes for a batch, padding excluded: the prompt once per request
    (share_prompt) or once per answer (transformers' num_return_sequences), plus max_new_tokens - 1
    decode positions per answer (the last sampled token is never fed back)."""
    prefill = sum(p * (1 if share_prompt else n) for p, n in zip(prompt_lens, ns))
    return prefill + sum(ns) * (max_new_tokens - 1)


# --8<-- [start:beam]
def cache_indirection(parents: torch.Tensor) -> torch.Tensor:
    """Beam management without copying KV (TensorRT-LLM's cache indirection). At step t every beam slot
    writes the KV of its own token into its own cache row, cache[t, slot]; parents[t, b] is the slot that
    the hypothesis now in slot b occupied at step t - 1 (row 0 unused). Returns ind[t, b], the slot whose
    row t belongs to the hypothesis in slot b after the last step: attention of beam b reads position t
    from cache[t, ind[t, b]]. Reordering beams changes only this small table; no KV is copied."""
    steps, beams = parents.shape
    ind = torch.empty_like(parents)
    slot = torch.arange(beams)
    for t in range(steps - 1, -1, -1):   # walk back from the newest step
        ind[t] = slot
        slot = parents[t, slot]
    return ind
# --8<-- [end:beam]
