"""code/algorithm/pretrain.py (docs/algorithm/pretraining-run.md, notebooks/algorithm/pretraining-lab.ipynb):
the corpus and its entropy floor, uint16 shards and a loader strided by rank, packing with a document
mask against running each document alone, weight tying, the modern block's options, global-norm
clipping against torch.nn.utils.clip_grad_norm_, the WSD and cosine schedules, bits per byte, a short
run resumed from a checkpoint, and the GPU experiment's CPU smoke mode."""
from __future__ import annotations

import importlib
import io
import math
import sys

import numpy as np
import pytest
import torch

from algorithm_helpers import load_listing
from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "algorithm"))
load_listing("bpe", "bpe.py")
P = load_listing("algorithm_pretrain", "pretrain.py")

LANG = P.make_language(n_words=64, k=4, seed=0)
TINY = P.GPTConfig(vocab_size=320, seq_len=32, n_layer=2, n_head=2, d_model=32)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    docs, vocab, merges, enc, toks = P.build_corpus(LANG, 400, 40, 320)
    paths, val = P.write_shards(toks, tmp_path_factory.mktemp("shards"), 0, 4000, 40)
    return docs, vocab, enc, toks, paths, val


def test_language_is_reproducible_and_floor_is_the_source_nll():
    a, b = P.sample_docs(LANG, 30, 5), P.sample_docs(LANG, 30, 5)
    assert a == b and P.sample_docs(LANG, 30, 6) != a
    assert P.make_language(n_words=64, k=4, seed=0) == LANG
    # nats of one document recomputed from its words: log n per sentence start, then the choices
    text, nats = a[0]
    words = [w.rstrip(".") for w in text.split(" ")[1:]]
    idx = {w: i for i, w in enumerate(LANG.words)}
    expect, prev = 0.0, None
    for tok in text.replace(".", " .").split():
        if tok == ".":
            expect -= math.log(LANG.p_stop)
            prev = None
        elif prev is None:
            expect += math.log(len(LANG.words))
            prev = idx[tok]
        else:
            j = LANG.successors[prev].index(idx[tok])
            expect -= math.log((1 - LANG.p_stop) * LANG.zipf[j])
            prev = idx[tok]
    assert words and abs(nats - expect) < 1e-9
    assert 0.3 < P.entropy_floor_bpb(a) < 2.0


def test_shards_are_uint16_and_ranks_see_disjoint_windows_that_cover(corpus):
    docs, vocab, enc, toks, paths, val = corpus
    arrays = [np.load(p) for p in paths]
    assert all(a.dtype == np.uint16 for a in arrays) and len(paths) > 1
    assert np.array_equal(np.concatenate(arrays), np.concatenate([[0] + t for t in toks[40:]]).astype(np.uint16))
    B, T, world = 2, 16, 3
    n_rounds = P.ShardLoader(paths, B, T).rounds_in(len(arrays[0])) // world
    seen = []
    for r in range(world):
        ld = P.ShardLoader(paths[:1], B, T, rank=r, world=world)
        for _ in range(n_rounds):
            a, _ = ld.window()
            x, y = ld.next_batch()
            assert torch.equal(x.flatten(), torch.from_numpy(arrays[0][a:a + B * T].astype(np.int64)))
            assert torch.equal(y.flatten(), torch.from_numpy(arrays[0][a + 1:a + B * T + 1].astype(np.int64)))
            seen.append(range(a, a + B * T))
    covered = sorted(i for w in seen for i in w)
    assert covered == list(range(n_rounds * world * B * T))      # disjoint (no repeats) and covering


def test_loader_resumes_from_its_state(corpus):
    *_, paths, _ = corpus
    a = P.ShardLoader(paths, 2, 16)
    for _ in range(7):
        a.next_batch()
    b = P.ShardLoader(paths, 2, 16)
    b.load_state_dict(a.state_dict())
    for _ in range(200):                                           # crosses shard boundaries
        xa, xb = a.next_batch()[0], b.next_batch()[0]
        assert torch.equal(xa, xb)


def test_document_mask_equals_running_each_document_alone(corpus):
    *_, toks, _, _ = corpus
    torch.manual_seed(0)
    model = P.GPT(TINY).eval()
    docs = [[0] + t[:9] for t in toks[:3]]
    row = torch.tensor([sum(docs, [])])
    doc, pos = P.doc_positions(row, bos=0)
    packed = model(row, pos=pos, mask=P.document_mask(doc))
    alone = torch.cat([model(torch.tensor([d])) for d in docs], 1)
    assert torch.allclose(packed, alone, atol=1e-5)
    assert not torch.allclose(model(row), alone, atol=1e-3)      # plain causal attention crosses documents


def test_bestfit_rows_start_with_bos_and_keep_every_token_or_count_it(corpus):
    *_, toks, _, _ = corpus
    docs = [[0] + t for t in toks]
    rows, cropped = P.pack_bestfit(docs, 63, buffer=16)
    assert all(len(r) == 64 and r[0] == 0 for r in rows)
    assert sum(map(len, rows)) + cropped == sum(map(len, docs))
    concat = P.pack_concat(docs, 63)
    assert all(len(r) == 64 for r in concat) and sum(r[0] != 0 for r in concat) > 0


def test_tied_gradient_is_the_sum_of_the_untied_ones():
    torch.manual_seed(0)
    untied = P.GPT(TINY)
    tied = P.GPT(P.GPTConfig(**{**TINY.__dict__, "tie": True}))
    tied.load_state_dict({k: v for k, v in untied.state_dict().items() if k != "lm_head.weight"}, strict=False)
    with torch.no_grad():
        untied.lm_head.weight.copy_(untied.wte.weight)
    x = torch.randint(TINY.vocab_size, (2, 16))
    untied(x, x).backward()
    tied(x, x).backward()
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(untied) - n(tied) == TINY.vocab_size * TINY.d_model
    assert tied.lm_head.weight is tied.wte.weight
    assert torch.allclose(tied.wte.weight.grad, untied.wte.weight.grad + untied.lm_head.weight.grad, atol=1e-6)


def test_softcap_qknorm_and_parameter_free_rmsnorm():
    # the model's soft cap against the same weights without it: c * tanh(z / c), bounded by c,
    # and within z^3 / (3 c^2) of the identity (the first term of the Taylor series) for small z
    torch.manual_seed(0)
    raw_m = P.GPT(P.GPTConfig(**{**TINY.__dict__, "softcap": None}))
    cap_m = P.GPT(TINY)
    cap_m.load_state_dict(raw_m.state_dict())
    x = torch.randint(TINY.vocab_size, (2, 16))
    with torch.no_grad():
        for m in (raw_m, cap_m):
            m.lm_head.weight.mul_(200)
        raw, capped = raw_m(x), cap_m(x)
    c = TINY.softcap
    assert raw.abs().max() > 3 * c and capped.abs().max() <= c
    assert torch.allclose(capped, c * torch.tanh(raw / c), atol=1e-5)
    small = raw.abs() < 1
    assert small.sum() > 10 and ((capped - raw).abs() <= raw.abs() ** 3 / (3 * c * c) + 1e-5)[small].all()
    torch.manual_seed(0)
    for qk_norm in (False, True):
        m = P.GPT(P.GPTConfig(**{**TINY.__dict__, "qk_norm": qk_norm}))
        with torch.no_grad():
            m.blocks[0].attn.qkv.weight.mul_(100)
        x = torch.randn(1, 16, TINY.d_model)
        ang = torch.arange(16)[None, :, None].float() * m.inv_freq
        q, k, _ = m.blocks[0].attn.qk(x, ang.cos()[:, None], ang.sin()[:, None])
        hd = TINY.d_model // TINY.n_head
        logits = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        if qk_norm:
            assert logits.abs().max() <= math.sqrt(hd) * (1 + 1e-4)
        else:
            assert logits.abs().max() > 10 * math.sqrt(hd)
    layer = P.GPT(P.GPTConfig(**{**TINY.__dict__, "norm": "layer"}))
    rmsm = P.GPT(TINY)
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(layer) - n(rmsm) == (2 * TINY.n_layer + 1) * 2 * TINY.d_model
    # a per-channel gain in front of a linear layer folds into its weight
    g, W, x = torch.rand(8) + 0.5, torch.randn(5, 8), torch.randn(3, 8)
    assert torch.allclose((g * P.rms(x)) @ W.T, P.rms(x) @ (W * g).T, atol=1e-5)


def test_clip_equals_torch_clip_grad_norm():
    torch.manual_seed(0)
    a, b = P.GPT(TINY), P.GPT(TINY)
    b.load_state_dict(a.state_dict())
    x = torch.randint(TINY.vocab_size, (2, 16))
    (100 * a(x, x)).backward()
    (100 * b(x, x)).backward()
    ours = P.clip_grad_global_(a.parameters(), 1.0)
    ref = torch.nn.utils.clip_grad_norm_(b.parameters(), 1.0)
    assert torch.allclose(ours, ref) and ours > 1
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-7)
    after = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in a.parameters()]))
    assert abs(float(after) - 1.0) < 1e-4


def test_schedules():
    total, warm = 100, 10
    w = [P.wsd(s, total, warm, 0.2) for s in range(total)]
    c = [P.cosine(s, total, warm) for s in range(total)]
    assert w[:warm] == c[:warm] == [(s + 1) / warm for s in range(warm)]
    assert set(w[warm:80]) == {1.0} and all(x > y for x, y in zip(w[80:], w[81:])) and w[-1] == pytest.approx(1 / 20)
    assert all(x >= y for x, y in zip(c[warm:], c[warm + 1:])) and c[warm] == 1.0
    assert sum(w) > sum(c)     # WSD spends more steps at the peak


def test_bpb_is_tokenizer_independent_for_the_source(corpus):
    docs, vocab, enc, toks, _, _ = corpus
    import bpe

    byte_enc = bpe.ByteBPE(vocab[:257], [], special_tokens=["<|bos|>"])
    nats = sum(n for _, n in docs)
    nbytes = sum(len(t.encode()) for t, _ in docs)
    n_bpe, n_byte = sum(map(len, toks)), sum(len(byte_enc.encode(t)) for t, _ in docs)
    assert n_byte == nbytes and n_bpe < nbytes / 2
    # the same total nats: per-token loss differs by the compression ratio, bits per byte does not
    assert nats / n_bpe > 2 * nats / n_byte
    assert P.entropy_floor_bpb(docs) == pytest.approx(nats / (math.log(2) * nbytes))


def test_bpb_counts_only_real_byte_targets():
    # evaluate_bpb against log_softmax by hand: BOS targets (0 bytes) and ignored targets (-1) drop out
    torch.manual_seed(0)
    m = P.GPT(TINY).eval()
    x = torch.randint(1, TINY.vocab_size, (2, 16))
    y = torch.randint(1, TINY.vocab_size, (2, 16))
    y[0, :5], y[1, 3] = -1, 0
    tb = torch.randint(1, 5, (TINY.vocab_size,))
    tb[0] = 0
    got = P.evaluate_bpb(m, [(x, y)], tb)
    with torch.no_grad():
        logp = torch.log_softmax(m(x), -1)
    keep = y > 0
    nll = -logp[keep].gather(1, y[keep][:, None]).squeeze(1)
    assert got["bpb"] == pytest.approx(float(nll.sum()) / (math.log(2) * int(tb[y[keep]].sum())), rel=1e-5)
    assert got["loss"] == pytest.approx(float(nll.mean()), rel=1e-5)


def test_short_run_learns_and_resumes_identically(corpus):
    docs, vocab, enc, toks, paths, val = corpus
    cfg = P.GPTConfig(**{**TINY.__dict__, "vocab_size": len(vocab)})
    torch.manual_seed(0)
    model = P.GPT(cfg)
    opt = P.make_optimizer(model, 3e-3)
    loader = P.ShardLoader(paths, 4, 32)
    tb = P.token_byte_lengths(vocab, [0])
    vb = P.val_batches(val, 4, 32)
    before = P.evaluate_bpb(model, vb, tb)
    lr = lambda s: P.wsd(s, 60, 5, 0.3)  # noqa: E731
    P.train_steps(model, opt, loader, 30, lr, 3e-3)
    buf = io.BytesIO()
    torch.save(P.checkpoint(model, opt, loader, 30), buf)
    rest, _ = P.train_steps(model, opt, loader, 3, lr, 3e-3, start=30)
    buf.seek(0)
    ck = torch.load(buf, weights_only=True)
    m2 = P.GPT(P.GPTConfig(**ck["config"]))
    m2.load_state_dict(ck["model"])
    o2 = P.make_optimizer(m2, 3e-3)
    o2.load_state_dict(ck["opt"])
    l2 = P.ShardLoader(paths, 4, 32)
    l2.load_state_dict(ck["loader"])
    again, _ = P.train_steps(m2, o2, l2, 3, lr, 3e-3, start=ck["step"])
    assert again == rest
    after = P.evaluate_bpb(model, vb, tb)
    assert after["bpb"] < before["bpb"] - 1.0
    assert after["bpb"] > P.entropy_floor_bpb(docs[:40])
    assert after["loss"] / after["bpb"] == pytest.approx(math.log(2) * after["bytes_per_token"])


def test_gpu_experiment_smoke_runs_on_cpu(monkeypatch):
    monkeypatch.setenv("PRETRAIN_SMOKE", "1")
    sys.modules.pop("bench.experiments.pretraining", None)
    exp = importlib.import_module("bench.experiments.pretraining")
    assert exp.TITLE and exp.USED_BY == ["docs/algorithm/pretraining-run.md"]
    out = exp.run(torch)
    assert out["smoke"] and out["final_val_bpb"] > out["entropy_floor_bpb"]
    assert out["val_curve"][-1]["bpb"] < out["val_curve"][0]["bpb"]
    sys.modules.pop("bench.experiments.pretraining", None)
