"""Evaluating language models and the stages after pretraining (docs/algorithm/evaluation.md,
notebooks/algorithm/evaluation-lab.ipynb): multiple-choice scoring by log-likelihood (sum, per token,
per character, per byte), DCLM's centred CORE metric, chat-model scoring (letters, "####" answers,
pass@k and sandboxed execution), a simulated LLM judge with position bias, n-gram contamination,
classification fine-tuning at the last token, SFT loss masks over a mixture, and the tool-use
state machine of an inference engine (forced tokens).

Everything runs on tiny random-weight models or on hand-built bigram tables; nanochat's
nanochat/core_eval.py, scripts/base_eval.py, scripts/chat_eval.py, nanochat/tokenizer.py and
nanochat/engine.py are the references the functions follow. Tested in
tests/test_algorithm_evaluation.py.
"""
from __future__ import annotations

import math
import random
import re
import string
import subprocess
import sys
from collections import deque
from itertools import combinations

import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:mc]
def continuation_logprobs(logits_fn, context, continuation):
    """Log-probability of each continuation token given everything before it, from ONE forward
    pass over context + continuation. The logits at position t predict token t + 1, so the
    continuation tokens are scored by the logits one position to their left."""
    ids = torch.tensor([list(context) + list(continuation)])
    with torch.no_grad():
        logp = logits_fn(ids)[0].float().log_softmax(-1)              # (T, V)
    start = len(context)
    targets = ids[0, start:]
    return logp[start - 1:-1].gather(-1, targets[:, None]).squeeze(-1)  # (len(continuation),)


def choice_scores(logits_fn, context, choices, choice_texts=None):
    """Score every candidate four ways. 'sum' is the total log-likelihood (lm-eval-harness acc,
    build-nanogpt pred); 'per_token' divides by the token count (build-nanogpt acc_norm, nanochat
    CORE: lowest mean loss); 'per_char' by the characters of the text (harness acc_norm);
    'per_byte' by its UTF-8 bytes (harness acc_bytes)."""
    out = {"sum": [], "per_token": [], "per_char": [], "per_byte": []}
    for i, cont in enumerate(choices):
        s = continuation_logprobs(logits_fn, context, cont).sum().item()
        out["sum"].append(s)
        out["per_token"].append(s / len(cont))
        if choice_texts is not None:
            out["per_char"].append(s / len(choice_texts[i]))
            out["per_byte"].append(s / len(choice_texts[i].encode("utf-8")))
    return {k: v for k, v in out.items() if v}


def pick(scores):
    """Index of the best candidate (highest log-likelihood score)."""
    return max(range(len(scores)), key=lambda i: scores[i])


def lm_task_correct(logits_fn, context, continuation):
    """nanochat's 'language_modeling' CORE tasks (LAMBADA, SQuAD, ...): correct only if greedy
    decoding reproduces every continuation token, i.e. each argmax equals the next token."""
    ids = torch.tensor([list(context) + list(continuation)])
    with torch.no_grad():
        pred = logits_fn(ids)[0].argmax(-1)
    start = len(context)
    return bool((pred[start - 1:-1] == ids[0, start:]).all())
# --8<-- [end:mc]


class BigramLM(nn.Module):
    """A language model whose next-token logits depend only on the current token: a V x V table.
    Log-probabilities are then known in closed form, which makes hand-built test cases exact."""

    def __init__(self, table):
        super().__init__()
        self.table = nn.Parameter(torch.as_tensor(table, dtype=torch.float32), requires_grad=False)

    def forward(self, ids):
        return self.table[ids]


# --8<-- [start:core]
def centred(acc, chance):
    """DCLM's centred accuracy: 0 at random guessing, 1 at perfect. nanochat's base_eval reads the
    random baseline in percent from eval_meta_data.csv and uses (acc - 0.01 b) / (1 - 0.01 b)."""
    return (acc - chance) / (1.0 - chance)


def core_metric(results):
    """results: {task: (accuracy, chance)} -> (centred per task, CORE = mean of the centred)."""
    c = {task: centred(acc, chance) for task, (acc, chance) in results.items()}
    return c, sum(c.values()) / len(c)
# --8<-- [end:core]


# --8<-- [start:chat]
def categorical_pick(last_logits, letter_ids, letters="ABCD"):
    """nanochat chat_eval for MMLU/ARC: read the logits at the last prompt position, keep only
    the token ids of the allowed letters, and take the argmax among them. No sampling, no
    parsing: the model cannot answer off-format, which makes the task easier than generation."""
    focus = last_logits[list(letter_ids)]
    return letters[int(focus.argmax())]


GSM_RE = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_gsm8k(completion):
    """The number after '#### ' with thousands separators removed (nanochat tasks/gsm8k.py,
    after OpenAI's grade-school-math); None when the marker is missing."""
    m = GSM_RE.search(completion)
    return m.group(1).strip().replace(",", "") if m else None


def pass_at_k(n, c, k):
    """Unbiased pass@k from n samples of which c pass (Chen et al. 2021, HumanEval):
    1 - C(n-c, k) / C(n, k), as a running product to avoid huge binomials."""
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_bruteforce(n, c, k):
    """The definition: over all size-k subsets of the n samples, the share containing a pass."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def run_candidate(program, test, entry_point, timeout=2.0):
    """Execution-based grading: run completion + tests in a fresh interpreter (isolated mode, no
    site packages) with a wall-clock limit, pass = exit status 0. nanochat/execution.py adds
    memory rlimits and disables destructive os functions; neither is a security sandbox."""
    src = f"{program}\n\n{test}\n\ncheck({entry_point})\n"
    try:
        r = subprocess.run([sys.executable, "-I", "-S", "-c", src], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0
# --8<-- [end:chat]


# --8<-- [start:judge]
def judge_first_wins_prob(q_first, q_second, bias, temperature=1.0):
    """A simulated pairwise judge: P(judge picks the answer shown first) = sigmoid(quality gap /
    T + bias). bias > 0 is a position bias towards the first slot."""
    return torch.sigmoid(torch.as_tensor((q_first - q_second) / temperature + bias)).item()


def swap_average(q_a, q_b, bias, temperature=1.0):
    """Ask in both orders and average: P(A) = (P(A first wins) + 1 - P(B first wins)) / 2."""
    ab = judge_first_wins_prob(q_a, q_b, bias, temperature)
    ba = judge_first_wins_prob(q_b, q_a, bias, temperature)
    return 0.5 * (ab + (1.0 - ba))


def judge_pairs(qualities, pairs, bias, rng, temperature=1.0, swap=False):
    """Sample verdicts for (i, j) pairs. Without swap: one call with i first; returns +1 (i wins)
    or -1. With swap: two calls (i first, then j first); MT-Bench's conservative rule counts a win
    only when both orders agree, otherwise a tie (0)."""
    verdicts = []
    for i, j in pairs:
        first = 1 if rng.random() < judge_first_wins_prob(qualities[i], qualities[j], bias, temperature) else -1
        if not swap:
            verdicts.append(first)
            continue
        second = -1 if rng.random() < judge_first_wins_prob(qualities[j], qualities[i], bias, temperature) else 1
        verdicts.append(first if first == second else 0)
    return verdicts


def single_grade(quality, rng, noise=1.0):
    """Single-answer grading: the judge sees one answer and returns a 1-10 score. No order to be
    biased by, but the absolute scale is noisy and coarse (ties are common)."""
    return int(min(10, max(1, round(quality + rng.gauss(0.0, noise)))))
# --8<-- [end:judge]


_ADJ = ["old", "young", "tall", "quiet", "happy", "busy", "tired", "clever"]
_WHO = ["farmer", "student", "doctor", "teacher", "baker", "driver", "sailor", "painter"]
_VERB = ["bought", "found", "carried", "painted", "sold", "lost", "wanted", "hid"]
_NUM = ["two", "three", "five", "seven", "nine"]
_COLOR = ["red", "blue", "green", "white", "black", "yellow"]
_THING = ["apples", "boxes", "books", "coins", "ropes", "cups"]
_TAIL = ["at the market", "on monday", "near the river", "for a friend", "after school",
         "in the rain", "before noon", "at the station", "by the sea", "in the evening"]


def synthetic_text(rng, n_sentences):
    """Template sentences over a small vocabulary: many short phrases recur across documents (as
    'the answer is' does on the web), long word sequences almost never do by chance."""
    c = rng.choice
    return " ".join(f"the {c(_ADJ)} {c(_WHO)} {c(_VERB)} {c(_NUM)} {c(_COLOR)} {c(_THING)} {c(_TAIL)}."
                    for _ in range(n_sentences))


# --8<-- [start:contamination]
_PUNCT = str.maketrans("", "", string.punctuation)


def words(text):
    """GPT-3-style normalisation: lower case, punctuation dropped, split on whitespace."""
    return text.lower().translate(_PUNCT).split()


def ngram_set(text, n):
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def build_index(docs, n):
    """All n-grams of the training corpus (a hash set; at scale a Bloom filter or suffix array)."""
    index = set()
    for d in docs:
        index |= ngram_set(d, n)
    return index


def is_contaminated(item, index, n):
    """'Dirty' if any n-gram of the test item occurs in the corpus; an item shorter than n words is
    matched as a prefix of some corpus n-gram, a crude whole-item check of our own. (GPT-3's Appendix C
    instead picks N per dataset, the 5th percentile of item length clamped to 8..13 words, and skips
    items shorter than 8 words.)"""
    w = words(item)
    if len(w) < n:
        return any(tuple(w) == g[:len(w)] for g in index)   # crude whole-item check against n-gram starts
    return any(tuple(w[i:i + n]) in index for i in range(len(w) - n + 1))
# --8<-- [end:contamination]


# --8<-- [start:classify]
def to_classifier(lm, num_classes, unfreeze_last_blocks=1):
    """Raschka ch. 6: freeze the pretrained GPT, swap the LM head (d -> V) for a new d -> C head,
    and unfreeze the last transformer block(s) and the final LayerNorm. Works on transformers'
    GPT2LMHeadModel (blocks in .transformer.h, final norm .transformer.ln_f)."""
    for p in lm.parameters():
        p.requires_grad = False
    d = lm.config.n_embd
    lm.lm_head = nn.Linear(d, num_classes)                 # new parameters: trainable by default
    for block in lm.transformer.h[-unfreeze_last_blocks:]:
        for p in block.parameters():
            p.requires_grad = True
    for p in lm.transformer.ln_f.parameters():
        p.requires_grad = True
    return lm


def gpt2_block_params(d):
    """One GPT-2 block: attention c_attn (d x 3d + 3d) and c_proj (d x d + d), MLP c_fc (d x 4d +
    4d) and c_proj (4d x d + d), two LayerNorms (2d each): 12 d^2 + 13 d."""
    return 12 * d * d + 13 * d


def trainable_params_formula(d, num_classes, unfreeze_last_blocks=1):
    """Trainable after to_classifier: k blocks + final LayerNorm (2d) + head (d C + C)."""
    return unfreeze_last_blocks * gpt2_block_params(d) + 2 * d + d * num_classes + num_classes


def class_logits(model, ids, position=-1):
    """Classify from one position's output. Under the causal mask only the LAST position has
    attended to every token, so it is the one that can summarise the whole sequence."""
    return model(ids).logits[:, position, :]
# --8<-- [end:classify]


# --8<-- [start:sft]
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
            "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]


class CharTokenizer:
    """Byte-level tokens 0..255 plus nanochat's nine special tokens (ids 256..264)."""

    def __init__(self):
        self.special = {s: 256 + i for i, s in enumerate(SPECIALS)}
        self.vocab_size = 256 + len(SPECIALS)

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, ids):
        inv = {v: k for k, v in self.special.items()}
        out, buf = [], []
        for t in ids:
            if t in inv:
                out.append(bytes(buf).decode("utf-8", "replace"))
                buf = []
                out.append(inv[t])
            else:
                buf.append(t)
        out.append(bytes(buf).decode("utf-8", "replace"))
        return "".join(out)


def render_conversation(conv, tok):
    """nanochat tokenizer.render_conversation: ids and a mask that is 1 exactly on the tokens the
    assistant must learn to produce: its text, its tool calls (python_start .. python_end) and
    assistant_end. User turns, BOS, assistant_start and tool OUTPUT (output_start .. output_end,
    which the engine forces at inference) get 0."""
    sp = tok.special
    ids, mask = [sp["<|bos|>"]], [0]

    def add(tokens, m):
        ids.extend(tokens)
        mask.extend([m] * len(tokens))

    for i, msg in enumerate(conv):
        assert msg["role"] == ("user" if i % 2 == 0 else "assistant")
        if msg["role"] == "user":
            add([sp["<|user_start|>"]] + tok.encode(msg["content"]) + [sp["<|user_end|>"]], 0)
            continue
        add([sp["<|assistant_start|>"]], 0)
        parts = msg["content"] if isinstance(msg["content"], list) else [{"type": "text", "text": msg["content"]}]
        for part in parts:
            body = tok.encode(part["text"])
            if part["type"] == "text":
                add(body, 1)
            elif part["type"] == "python":
                add([sp["<|python_start|>"]] + body + [sp["<|python_end|>"]], 1)
            elif part["type"] == "python_output":
                add([sp["<|output_start|>"]] + body + [sp["<|output_end|>"]], 0)
        add([sp["<|assistant_end|>"]], 1)
    return ids, mask


def masked_targets(ids, mask, ignore_index=-1):
    """Inputs ids[:-1], targets ids[1:], with targets whose mask is 0 set to ignore_index (nanochat
    chat_sft: targets[mask[1:] == 0] = -1), so cross-entropy averages over assistant tokens only."""
    x = torch.tensor(ids[:-1])
    y = torch.tensor(ids[1:])
    y[torch.tensor(mask[1:]) == 0] = ignore_index
    return x, y


def task_mixture(tasks, seed=42):
    """nanochat tasks/common.py TaskMixture: concatenate (task, index) pairs, repeating a task in
    the list to give it more epochs, then shuffle once with a fixed seed."""
    rows = [(name, i) for name, size in tasks for i in range(size)]
    random.Random(seed).shuffle(rows)
    return rows
# --8<-- [end:sft]


# --8<-- [start:engine]
def use_calculator(expr):
    """nanochat engine.use_calculator, arithmetic branch: digits and + - * / . ( ) only, no '**'
    (9**9**9 has about 370 million digits), evaluated with no builtins; None on anything else or an error.
    (nanochat also allows str.count and wraps eval in a 3 s SIGALRM timeout.)"""
    expr = expr.replace(",", "")
    if not expr or not all(ch in "0123456789*+-/.() " for ch in expr) or "**" in expr:
        return None
    try:
        return eval(expr, {"__builtins__": {}}, {})   # noqa: S307 - whitelisted characters only
    except Exception:
        return None


class RowState:
    def __init__(self, tokens):
        self.tokens = list(tokens)
        self.forced = deque()          # tokens the engine will inject instead of sampling
        self.in_python = False
        self.expr = []
        self.done = False


def engine_step(state, sampled, tok):
    """One decoding step of nanochat's Engine.generate for one row. Returns (token, mask): the
    next token is the head of the forced queue if there is one (mask 0: not sampled), else the
    sampled token (mask 1). Seeing python_end closes the block, runs the expression, and queues
    output_start, the result's tokens and output_end to be forced on the next steps."""
    sp = tok.special
    forced = len(state.forced) > 0
    token = state.forced.popleft() if forced else sampled
    state.tokens.append(token)
    if token in (sp["<|assistant_end|>"], sp["<|bos|>"]):
        state.done = True
    if token == sp["<|python_start|>"]:
        state.in_python, state.expr = True, []
    elif token == sp["<|python_end|>"] and state.in_python:
        state.in_python = False
        result = use_calculator(tok.decode(state.expr)) if state.expr else None
        if result is not None:
            state.forced.extend([sp["<|output_start|>"], *tok.encode(str(result)), sp["<|output_end|>"]])
        state.expr = []
    elif state.in_python:
        state.expr.append(token)
    return token, 0 if forced else 1


def scripted_policy(script, prompt_len, tok):
    """A stand-in for a trained model: it continues `script` (the tokens it 'wants' to write),
    skipping over tool output that the engine inserted, so it never repeats or loses a token."""
    sp = tok.special

    def next_token(tokens):
        own, inside = 0, False
        for t in tokens[prompt_len:]:
            if t == sp["<|output_start|>"]:
                inside = True
            elif t == sp["<|output_end|>"]:
                inside = False
            elif not inside:
                own += 1
        return script[own] if own < len(script) else sp["<|assistant_end|>"]
    return next_token


def generate_with_tools(next_token_fn, prompt, tok, max_tokens=200):
    """Drive engine_step with a policy next_token_fn(tokens) -> token (a model's argmax or sample).
    The policy is queried every step, as in nanochat, and its token is discarded while forced
    tokens are pending. Returns the generated tokens and their sampled(1)/forced(0) mask."""
    state = RowState(prompt)
    out, masks = [], []
    while not state.done and len(out) < max_tokens:
        token, m = engine_step(state, next_token_fn(state.tokens), tok)
        out.append(token)
        masks.append(m)
    return out, masks
# --8<-- [end:engine]


def unbiased_expectation(n, p, k):
    """E over c ~ Binomial(n, p) of pass_at_k(n, c, k); equals 1 - (1 - p)^k exactly."""
    return sum(math.comb(n, c) * p ** c * (1 - p) ** (n - c) * pass_at_k(n, c, k) for c in range(n + 1))
