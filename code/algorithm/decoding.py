"""Decoding strategies written by hand (docs/algorithm/decoding.md, notebooks/algorithm/decoding-lab.ipynb):
greedy, sampling with temperature / top-k / top-p / min-p, the CTRL repetition penalty, OpenAI's
presence and frequency penalties, n samples per prompt, and beam search with a length penalty.

The formulas follow transformers' generation/logits_process.py and the loops follow
generation/utils.py (_sample, _beam_search) closely enough that, on the same model, seeds and
settings, tests/test_algorithm_decoding.py gets the same tokens as `model.generate`.
"""
from __future__ import annotations

import torch

NEG_INF = float("-inf")


# --8<-- [start:processors]
def temperature(scores, t: float):
    """Divide the logits by t: t < 1 sharpens the distribution, t > 1 flattens it."""
    return scores / t


def top_k(scores, k: int):
    """Keep the k largest logits (ties with the k-th are kept too), set the rest to -inf."""
    kth = torch.topk(scores, min(k, scores.shape[-1])).values[..., -1:]
    return scores.masked_fill(scores < kth, NEG_INF)


def top_p(scores, p: float, min_keep: int = 1):
    """Nucleus: the smallest set of most likely tokens whose probability adds up to at least p.
    A token is dropped when the tokens strictly more likely than it already reach p."""
    probs, order = scores.softmax(-1).sort(-1, descending=True)
    mass_before = probs.cumsum(-1) - probs
    drop_sorted = mass_before >= p
    drop_sorted[..., :min_keep] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return scores.masked_fill(drop, NEG_INF)


def min_p(scores, p_base: float, min_keep: int = 1):
    """min-p (Nguyen et al. 2024): keep tokens whose probability is at least p_base times the top
    token's probability; the cut-off follows the model's confidence."""
    probs = scores.softmax(-1)
    drop = probs < p_base * probs.max(-1, keepdim=True).values
    keep = torch.topk(probs, min(min_keep, probs.shape[-1])).indices
    drop = drop.scatter(-1, keep, False)
    return scores.masked_fill(drop, NEG_INF)


def repetition_penalty(scores, seen_ids, theta: float):
    """CTRL (Keskar et al. 2019) as transformers applies it: for every token already in the
    context (prompt included), a positive logit is divided by theta, a negative one multiplied by
    theta, so both move towards 'less likely'. Applied once per token, however often it occurred."""
    seen = scores.gather(-1, seen_ids)
    penalised = torch.where(seen < 0, seen * theta, seen / theta)
    return scores.scatter(-1, seen_ids, penalised)


def presence_frequency(scores, generated_ids, presence: float, frequency: float):
    """OpenAI's additive penalties: logit[j] -= frequency * c[j] + presence * (c[j] > 0), with c[j]
    the number of times token j was generated so far (the prompt does not count)."""
    counts = torch.zeros_like(scores)
    if generated_ids.shape[-1]:
        counts.scatter_add_(-1, generated_ids, torch.ones_like(generated_ids, dtype=scores.dtype))
    return scores - frequency * counts - presence * (counts > 0).to(scores.dtype)
# --8<-- [end:processors]


# --8<-- [start:pipeline]
def process(scores, ids, prompt_len: int, *, do_sample: bool, rep_penalty: float = 1.0,
            presence: float = 0.0, frequency: float = 0.0, temp: float = 1.0, k: int = 0,
            p: float = 1.0, minp: float | None = None):
    """The order transformers uses (GenerationMixin._get_logits_processor): penalties first,
    on the raw logits; then, only when sampling, temperature, top-k, top-p, min-p."""
    if rep_penalty != 1.0:
        scores = repetition_penalty(scores, ids, rep_penalty)
    if presence or frequency:
        scores = presence_frequency(scores, ids[:, prompt_len:], presence, frequency)
    if do_sample:
        if temp != 1.0:
            scores = temperature(scores, temp)
        if k:
            scores = top_k(scores, k)
        if p < 1.0:
            scores = top_p(scores, p)
        if minp is not None:
            scores = min_p(scores, minp)
    return scores
# --8<-- [end:pipeline]


# --8<-- [start:generate]
@torch.no_grad()
def generate(model, prompt, max_new_tokens: int, *, do_sample: bool = False, n: int = 1,
             eos_token_id: int | None = None, pad_token_id: int = 0, return_scores: bool = False, **knobs):
    """Greedy (argmax) or sampling (torch.multinomial on the processed distribution), one token
    per step with a KV cache. n > 1 repeats the prompt n times and draws all rows with one
    multinomial call per step, as transformers does for num_return_sequences. A row that emitted
    EOS is padded from then on; the loop stops when every row is done."""
    ids = prompt.repeat_interleave(n, dim=0)
    prompt_len, cache, step_input = ids.shape[1], None, ids
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    history = []
    for _ in range(max_new_tokens):
        out = model(input_ids=step_input, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        logits = out.logits[:, -1].float()
        scores = process(logits, ids, prompt_len, do_sample=do_sample, **knobs)
        history.append(scores)
        if do_sample:
            nxt = torch.multinomial(scores.softmax(-1), num_samples=1).squeeze(1)
        else:
            nxt = scores.argmax(-1)
        if eos_token_id is not None:
            nxt = torch.where(done, pad_token_id, nxt)
            done |= nxt == eos_token_id
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        step_input = nxt[:, None]
        if done.all():
            break
    return (ids, history) if return_scores else ids
# --8<-- [end:generate]


# --8<-- [start:beam]
@torch.no_grad()
def beam_search(model, prompt, num_beams: int, max_new_tokens: int, eos_token_id: int,
                length_penalty: float = 1.0, early_stopping: bool | str = False):
    """Beam search for one prompt. Each step expands every running beam by every token, keeps the
    2 * num_beams best continuations by summed log-probability, moves those that end (EOS or the
    length limit) and rank among the first num_beams into the finished set, scored
    sum_logprob / generated_len ** length_penalty, and continues with the num_beams best that have
    not ended. Returns the finished hypotheses as (score, tokens), best first; generate() returns
    the first num_return_sequences of the same list."""
    prompt_len = prompt.shape[1]
    max_len = prompt_len + max_new_tokens
    seqs = prompt.repeat(num_beams, 1)
    scores = torch.full((num_beams,), -1e9)
    scores[0] = 0.0                                   # identical beams: only the first one counts at step 1
    finished: list[tuple[torch.Tensor, torch.Tensor]] = []   # (score, tokens), best first
    cache, step_input, open_for_better = None, seqs, True
    while True:
        out = model(input_ids=step_input, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        logp = out.logits[:, -1].float().log_softmax(-1)
        vocab = logp.shape[-1]
        total = (logp + scores[:, None]).reshape(-1)
        cand_scores, flat = torch.topk(total, 2 * num_beams)
        src, tok = flat // vocab, flat % vocab
        cand = torch.cat([seqs[src], tok[:, None]], dim=1)
        ended = (tok == eos_token_id) | (cand.shape[1] >= max_len)

        gen_len = cand.shape[1] - prompt_len
        full = len(finished) == num_beams
        for j in range(num_beams):                    # only the top num_beams candidates may finish
            if ended[j] and open_for_better and not (full and early_stopping is True):
                finished.append((cand_scores[j] / (gen_len ** length_penalty), cand[j]))
        finished = sorted(finished, key=lambda h: -h[0].item())[:num_beams]

        alive = cand_scores + ended.float() * -1e9    # ended candidates cannot continue
        keep = torch.topk(alive, num_beams).indices
        seqs, scores, step_input = cand[keep], alive[keep], cand[keep][:, -1:]
        cache.reorder_cache(src[keep])

        # Can a running beam still beat the worst finished one? transformers' heuristic: divide the best
        # running score by the current length (or by the longest possible when early_stopping="never"
        # and the penalty rewards length).
        if len(finished) == num_beams:
            length = (max_len if early_stopping == "never" and length_penalty > 0 else seqs.shape[1]) - prompt_len
            open_for_better = open_for_better and bool(scores[0] / (length ** length_penalty) > finished[-1][0])
        all_full = len(finished) == num_beams and early_stopping is True
        if not open_for_better or all_full or bool(ended.all()):
            break
    return finished
# --8<-- [end:beam]


# --8<-- [start:race]
def sample_exponential_race(probs, generator=None):
    """argmax_i p_i / E_i with E_i ~ Exp(1): token i wins with probability p_i (the Gumbel-max trick
    with the exponential written out). torch.multinomial(probs, 1) does exactly this internally
    (aten/src/ATen/native/Distributions.cpp), and vLLM's sampler does it by hand to avoid the
    CPU-GPU synchronisation of multinomial; on the same generator all three pick the same tokens."""
    q = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / q).argmax(-1)
# --8<-- [end:race]
