"""An end-to-end small-GPT pretraining run (docs/algorithm/pretraining-run.md,
notebooks/algorithm/pretraining-lab.ipynb, bench/experiments/pretraining.py).

The pieces follow Karpathy's build-nanogpt (uint16 token shards, a loader that strides by rank,
weight tying, clip_grad_norm_ 1.0) and nanochat (nanochat/gpt.py: QK-norm, parameter-free RMSNorm,
ReLU^2 MLP, logit soft-capping at 15, untied head; nanochat/dataloader.py: BOS-aligned best-fit
packing; nanochat/loss_eval.py: bits per byte; scripts/base_train.py: warm-up, constant LR, linear
warm-down). The corpus is synthetic: a seeded word-level Markov source whose exact log-likelihood
gives the entropy floor of bits per byte. Tested in tests/test_algorithm_pretrain.py.
"""
from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# --8<-- [start:corpus]
@dataclass
class Language:
    """A word-level Markov source. A sentence starts with a uniformly drawn word; after each word it
    stops with probability p_stop (emits '.') or moves to one of the word's k successors with Zipf
    probabilities 1/(j+1) (normalised). After a '.', the document ends with probability p_end_doc."""
    words: list
    successors: list
    zipf: list
    p_stop: float = 0.12
    p_end_doc: float = 0.15


def _below(rng: random.Random, n: int) -> int:
    # Only Random.random() is guaranteed to give the same stream on every Python version for a
    # given seed (choice/randrange/shuffle are not), so every draw goes through it.
    return min(int(rng.random() * n), n - 1)


def make_language(n_words: int = 256, k: int = 8, seed: int = 0, **kw) -> Language:
    rng = random.Random(seed)
    cons, vows = "bdfghklmnprstvz", "aeiou"
    words, seen = [], set()
    while len(words) < n_words:
        w = "".join(cons[_below(rng, len(cons))] + vows[_below(rng, len(vows))] for _ in range(1 + _below(rng, 3)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    successors = []
    for _ in range(n_words):
        succ = []
        while len(succ) < k:
            j = _below(rng, n_words)
            if j not in succ:
                succ.append(j)
        successors.append(succ)
    z = [1 / (j + 1) for j in range(k)]
    return Language(words, successors, [p / sum(z) for p in z], **kw)


def sample_docs(lang: Language, n_docs: int, seed: int):
    """n_docs documents as (text, nats): text like ' foo bar. baz.'; nats is the negative log
    probability, under the source itself, of every choice a reader of the text has to guess:
    each word and each '.'. The end of a document is left out: in the token stream it is the next
    BOS, which bits per byte does not count, so the best predictor of the counted tokens never
    spends probability on it."""
    rng = random.Random(seed)
    n, cum = len(lang.words), np.cumsum(lang.zipf).tolist()
    docs = []
    for _ in range(n_docs):
        parts, nats = [], 0.0
        while True:
            w = _below(rng, n)                       # first word of a sentence: uniform
            parts.append(" " + lang.words[w])
            nats += math.log(n)
            while rng.random() >= lang.p_stop:       # continue the sentence
                u = rng.random()
                j = min(sum(c <= u for c in cum), len(cum) - 1)
                w = lang.successors[w][j]
                parts.append(" " + lang.words[w])
                nats -= math.log((1 - lang.p_stop) * lang.zipf[j])
            parts.append(".")
            nats -= math.log(lang.p_stop)
            if rng.random() < lang.p_end_doc:
                break
        docs.append(("".join(parts), nats))
    return docs


def entropy_floor_bpb(docs) -> float:
    """Bits per byte of the source's own predictions: no model can do better on average."""
    return sum(n for _, n in docs) / (math.log(2) * sum(len(t.encode()) for t, _ in docs))
# --8<-- [end:corpus]


# --8<-- [start:shards]
def write_shards(docs_tokens, out_dir, bos: int, shard_tokens: int, val_docs: int):
    """Concatenate BOS + tokens of every document into one stream of uint16 and cut it into
    shards of `shard_tokens` (build-nanogpt's fineweb.py: 1e8 tokens per shard, the first shard
    held out for validation). Here the first `val_docs` documents form the validation shard."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    def stream(docs):
        ids = np.concatenate([np.asarray([bos] + list(d), dtype=np.int64) for d in docs])
        assert ids.min() >= 0 and ids.max() < 2 ** 16, "uint16 holds token ids below 65536"
        return ids.astype(np.uint16)

    val = stream(docs_tokens[:val_docs])
    np.save(out_dir / "val_000000.npy", val)
    train = stream(docs_tokens[val_docs:])
    paths = []
    for i, start in enumerate(range(0, len(train), shard_tokens)):
        paths.append(out_dir / f"train_{i:06d}.npy")
        np.save(paths[-1], train[start:start + shard_tokens])
    return paths, out_dir / "val_000000.npy"


class ShardLoader:
    """build-nanogpt's DataLoaderLite with ranks: rank r of `world` reads the windows that start at
    (k * world + r) * B * T, each B * T + 1 tokens (inputs and the targets shifted by one). All ranks
    move to the next shard together, when the next round of `world` windows would not fit; the tail
    (fewer than world * B * T tokens) is dropped. state_dict() makes the position resumable."""

    def __init__(self, paths, B: int, T: int, rank: int = 0, world: int = 1):
        self.paths, self.B, self.T, self.rank, self.world = [Path(p) for p in paths], B, T, rank, world
        self.reset()

    def reset(self, shard: int = 0, round_: int = 0):
        self.shard, self.round = shard, round_
        self.tokens = np.load(self.paths[self.shard])

    def rounds_in(self, n_tokens: int) -> int:
        return (n_tokens - 1) // (self.B * self.T * self.world)

    def window(self) -> tuple[int, int]:
        start = (self.round * self.world + self.rank) * self.B * self.T
        return start, start + self.B * self.T + 1

    def next_batch(self):
        while self.round >= self.rounds_in(len(self.tokens)):
            self.reset((self.shard + 1) % len(self.paths))
        a, b = self.window()
        buf = torch.from_numpy(self.tokens[a:b].astype(np.int64))
        self.round += 1
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)

    def state_dict(self):
        return {"shard": self.shard, "round": self.round}

    def load_state_dict(self, state):
        self.reset(state["shard"], state["round"])
# --8<-- [end:shards]


# --8<-- [start:packing]
def pack_concat(docs, T: int):
    """Concatenate-and-split (nanoGPT): one stream, cut every T + 1 tokens. No token is lost, but a
    row can start in the middle of a document."""
    stream = [t for d in docs for t in d]
    return [stream[i:i + T + 1] for i in range(0, len(stream) - T, T + 1)]


def pack_bestfit(docs, T: int, buffer: int = 64):
    """nanochat's BOS-aligned best-fit: fill each row of T + 1 with the largest buffered document
    that still fits; when none fits, crop the shortest one to fill the row exactly. Every row starts
    with a BOS and no row is padded; the cropped tail of a document is discarded.
    Returns (rows, cropped token count)."""
    docs, pending, rows, cropped = list(docs), [], [], 0
    while docs or pending:
        while docs and len(pending) < buffer:
            pending.append(docs.pop(0))
        row = []
        while len(row) < T + 1 and pending:
            room = T + 1 - len(row)
            fits = [i for i, d in enumerate(pending) if len(d) <= room]
            if fits:
                row += pending.pop(max(fits, key=lambda i: len(pending[i])))
            else:
                d = pending.pop(min(range(len(pending)), key=lambda i: len(pending[i])))
                row += d[:room]
                cropped += len(d) - room
        if len(row) == T + 1:
            rows.append(row)
        else:                       # the last, partial row: dropped
            cropped += len(row)
    return rows, cropped


def doc_positions(row: torch.Tensor, bos: int):
    """Per-token document index and position inside the document: both restart at every BOS
    (a row that starts mid-document counts its first fragment as document 0 from position 0)."""
    is_bos = row == bos
    doc = torch.cumsum(is_bos.long(), -1) - is_bos[..., :1].long()
    idx = torch.arange(row.shape[-1]).expand_as(row)
    start = torch.where(is_bos, idx, torch.zeros_like(idx)).cummax(-1).values
    return doc, idx - start


def document_mask(doc: torch.Tensor) -> torch.Tensor:
    """Block-diagonal causal mask (B, T, T): query i may see key j iff j <= i and same document."""
    T = doc.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return (doc[..., :, None] == doc[..., None, :]) & causal
# --8<-- [end:packing]


# --8<-- [start:model]
@dataclass
class GPTConfig:
    vocab_size: int = 512
    seq_len: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    norm: str = "rms"            # "rms": parameter-free RMSNorm (nanochat); "layer": LayerNorm with gain and bias (GPT-2)
    qk_norm: bool = True         # RMS-normalise q and k per head before the dot product
    mlp: str = "relu2"           # "relu2": relu(x)^2 (Primer, nanochat); "gelu" (GPT-2)
    softcap: float | None = 15.0  # logits -> c * tanh(logits / c) (Gemma 2; nanochat uses 15)
    tie: bool = False            # share the embedding and the LM head (GPT-2, build-nanogpt)


def rms(x):
    return F.rms_norm(x, (x.size(-1),))


class Norm(nn.Module):
    def __init__(self, d: int, kind: str):
        super().__init__()
        self.ln = nn.LayerNorm(d) if kind == "layer" else None

    def forward(self, x):
        return self.ln(x) if self.ln is not None else rms(x)


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.h, self.qk_norm = cfg.n_head, cfg.qk_norm
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def qk(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(x).split(C, -1))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.qk_norm:          # each head's q and k now have norm sqrt(d_head): |q.k|/sqrt(d_head) <= sqrt(d_head)
            q, k = rms(q), rms(k)
        return q, k, v

    def forward(self, x, cos, sin, mask=None):
        B, T, C = x.shape
        q, k, v = self.qk(x, cos, sin)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=False)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=False)
        self.kind = cfg.mlp

    def forward(self, x):
        h = self.fc(x)
        return self.proj(F.relu(h).square() if self.kind == "relu2" else F.gelu(h))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n1, self.attn, self.n2, self.mlp = Norm(cfg.d_model, cfg.norm), Attention(cfg), Norm(cfg.d_model, cfg.norm), MLP(cfg)

    def forward(self, x, cos, sin, mask=None):
        x = x + self.attn(self.n1(x), cos, sin, mask)
        return x + self.mlp(self.n2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = Norm(cfg.d_model, cfg.norm)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie:
            self.lm_head.weight = self.wte.weight       # one Parameter, two uses
        hd = cfg.d_model // cfg.n_head
        self.register_buffer("inv_freq", 10000.0 ** (-torch.arange(0, hd, 2).float() / hd), persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:        # GPT-2: N(0, 0.02), residual projections scaled by 1/sqrt(2 L)
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets=None, pos=None, mask=None, reduction="mean"):
        B, T = idx.shape
        if pos is None:
            pos = torch.arange(T, device=idx.device).expand(B, T)
        ang = pos[..., None].float() * self.inv_freq              # (B, T, hd/2), RoPE angles per position
        cos, sin = ang.cos()[:, None], ang.sin()[:, None]
        x = self.wte(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        logits = self.lm_head(self.norm_f(x)).float()
        if self.cfg.softcap:
            logits = self.cfg.softcap * torch.tanh(logits / self.cfg.softcap)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1, reduction=reduction)

    def flops_per_token(self) -> int:
        """Training FLOPs per token (nanochat's estimate_flops, PaLM appendix B): 6 per weight of every
        matmul (the embedding lookup is not a matmul; a tied LM head still is one), plus
        12 * n_layer * d_model * seq_len for the q.k and attention.v products, forward and backward."""
        c = self.cfg
        matmul = sum(p.numel() for n, p in self.named_parameters() if p.dim() == 2 and not n.startswith("wte"))
        if c.tie:
            matmul += c.vocab_size * c.d_model
        return 6 * matmul + 12 * c.n_layer * c.d_model * c.seq_len
# --8<-- [end:model]


# --8<-- [start:clip]
def clip_grad_global_(params, max_norm: float, eps: float = 1e-6) -> torch.Tensor:
    """Scale every gradient by one factor min(1, max_norm / (||g|| + eps)), ||g|| the L2 norm of all
    gradients stacked into one vector: the update's direction is kept, only its length is bounded.
    Same formula as torch.nn.utils.clip_grad_norm_ (returns the norm before clipping)."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (total + eps), max=1.0)
    for g in grads:
        g.mul_(coef)
    return total
# --8<-- [end:clip]


# --8<-- [start:schedules]
def wsd(step: int, total: int, warmup: int, decay_frac: float, final: float = 0.0) -> float:
    """Warm-up, stable, decay (MiniCPM §4.1; nanochat's get_lr_multiplier): linear warm-up, a flat
    plateau at the peak, then a linear decay over the last decay_frac of the steps to `final`."""
    decay = round(decay_frac * total)
    if step < warmup:
        return (step + 1) / warmup
    if step < total - decay:
        return 1.0
    progress = (total - step) / decay            # 1 at the start of the decay, -> 0 at the end
    return final + (1 - final) * progress


def cosine(step: int, total: int, warmup: int, final: float = 0.0) -> float:
    """Linear warm-up, then a half cosine from the peak to `final` over all remaining steps."""
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * t))
# --8<-- [end:schedules]


# --8<-- [start:bpb]
def token_byte_lengths(vocab, special_ids) -> torch.Tensor:
    """nanochat's token_bytes: the UTF-8 length of each token, 0 for special tokens (not counted)."""
    n = torch.tensor([len(t) for t in vocab], dtype=torch.int64)
    n[list(special_ids)] = 0
    return n


@torch.no_grad()
def evaluate_bpb(model, batches, token_bytes) -> dict:
    """Sum of the loss over the targets that are real bytes, divided by ln 2 times their bytes
    (nanochat/loss_eval.py evaluate_bpb): special tokens (0 bytes) and ignored targets (-1) are not
    counted. Also returns the mean loss per counted token."""
    nats, nbytes, ntok = 0.0, 0, 0
    for x, y in batches:
        loss = model(x, y, reduction="none").view(-1)
        y = y.reshape(-1)
        b = torch.where(y >= 0, token_bytes[y.clamp(min=0)], torch.zeros_like(y))
        nats += float((loss * (b > 0)).sum())
        nbytes += int(b.sum())
        ntok += int((b > 0).sum())
    return {"bpb": nats / (math.log(2) * nbytes), "loss": nats / ntok, "bytes_per_token": nbytes / ntok}
# --8<-- [end:bpb]


# --8<-- [start:train]
def make_optimizer(model, lr: float, weight_decay: float = 0.1):
    """AdamW; only matrices decay (build-nanogpt's configure_optimizers)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def train_steps(model, opt, loader, steps, lr_at, base_lr: float, start: int = 0, clip: float | None = 1.0,
                autocast_dtype=None):
    """Run optimizer steps start .. start + steps - 1; lr_at(step) is the schedule's multiplier.
    Returns the training losses and the gradient norms before clipping."""
    losses, norms = [], []
    device = next(model.parameters()).device
    for step in range(start, start + steps):
        for g in opt.param_groups:
            g["lr"] = base_lr * lr_at(step)
        x, y = (t.to(device, non_blocking=True) for t in loader.next_batch())
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            loss = model(x, y)
        loss.backward()
        norm = clip_grad_global_(model.parameters(), clip) if clip else torch.tensor(float("nan"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        norms.append(float(norm))
    return losses, norms


def checkpoint(model, opt, loader, step: int) -> dict:
    """Everything needed to continue exactly: weights, the optimizer's moments and step counts,
    the loader's position, the step (the schedule is a function of it) and the config."""
    return {"model": model.state_dict(), "opt": opt.state_dict(), "loader": loader.state_dict(),
            "step": step, "config": asdict(model.cfg)}
# --8<-- [end:train]


def val_batches(path, B: int, T: int):
    """Every full window of the validation shard once, in order."""
    loader = ShardLoader([path], B, T)
    return [loader.next_batch() for _ in range(loader.rounds_in(len(loader.tokens)))]


def build_corpus(lang: Language, n_docs: int, n_val: int, vocab_size: int, seed: int = 1):
    """Documents, a byte-level BPE (code/algorithm/bpe.py) trained on the training documents with
    <|bos|> as id 0, and every document's tokens. Returns (docs, vocab, merges, enc, doc_tokens)."""
    import bpe

    docs = sample_docs(lang, n_docs, seed)
    texts = [t for t, _ in docs]
    vocab, merges = bpe.train(texts[n_val:], vocab_size, special_tokens=["<|bos|>"])
    enc = bpe.ByteBPE(vocab, merges, special_tokens=["<|bos|>"])
    return docs, vocab, merges, enc, [enc.encode(t) for t in texts]
