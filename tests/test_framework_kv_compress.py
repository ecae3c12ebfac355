"""KV-cache compression (code/framework/kv_compress.py): eviction policies against SDPA over the kept
tokens, the full cache recovered bit for bit when the budget covers the sequence, quantisation within
half a step, and stored bytes equal to the formula. Random-weight model, no training: well under 5 s."""
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "code" / "framework"))
import kv_compress as kc  # noqa: E402

T, B = 32, 6
POLICIES = ("window", "sink", "h2o", "snapkv")


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = kc.TinyDecoder().eval()
    ids, ans, needle = kc.make_batch(B, T, pairs=4, gen=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model, ids, model.qkv_states(ids)


def test_task_is_well_formed():
    ids, ans, needle = kc.make_batch(200, 64, pairs=8, gen=torch.Generator().manual_seed(0))
    assert (ids[:, 0] == kc.BOS).all() and ((ids[:, -1] >= kc.QUERY0) & (ids[:, -1] < kc.VAL0)).all()
    for i in range(200):
        ctx = ids[i, 1:-1]
        pairs = ctx[(ctx >= kc.PAIR0) & (ctx < kc.QUERY0)] - kc.PAIR0
        keys = (pairs // kc.N_VAL).tolist()
        assert len(pairs) == 8 and len(set(keys)) == 8
        k = ids[i, -1].item() - kc.QUERY0
        if k in keys:
            assert ans[i] == kc.VAL0 + pairs[keys.index(k)] % kc.N_VAL
            assert ids[i, needle[i]] == kc.PAIR0 + pairs[keys.index(k)]
        else:
            assert ans[i] == kc.NONE and needle[i] == -1


def test_model_forward_equals_cache_path(setup):
    model, ids, _ = setup
    with torch.no_grad():
        ref = model(ids)
        got = kc.last_logits(model, ids)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", POLICIES)
def test_budget_covering_sequence_is_full_cache_bitwise(setup, policy):
    model, ids, _ = setup
    with torch.no_grad():
        full = kc.last_logits(model, ids, "full")
        for budget in (T, T + 5):
            assert torch.equal(kc.last_logits(model, ids, policy, budget), full)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("positions", ("original", "cache"))
def test_evicted_attention_equals_sdpa_over_kept(setup, policy, positions):
    model, ids, (x, q, k, v) = setup
    pos = torch.arange(T)
    budget = 12
    idx = kc.select(policy, budget, kc.rope(q, pos, model.rot), kc.rope(k, pos, model.rot))
    assert idx.shape == (B, model.h, budget)
    assert (idx[..., 1:] > idx[..., :-1]).all() and (idx[..., -1] == T - 1).all()  # sorted, query kept
    got = kc.attend(q, k, v, idx, model.rot, positions)
    for b in range(B):
        for h in range(model.h):
            kept = idx[b, h]
            kpos = kept if positions == "original" else torch.arange(budget)
            qpos = torch.tensor([T - 1 if positions == "original" else budget - 1])
            ref = F.scaled_dot_product_attention(kc.rope(q[b, h, -1:], qpos, model.rot),
                                                 kc.rope(k[b, h, kept], kpos, model.rot), v[b, h, kept])
            torch.testing.assert_close(got[b, h], ref, rtol=1e-5, atol=1e-6)


def test_policy_membership(setup):
    model, ids, (x, q, k, v) = setup
    pos = torch.arange(T)
    qr, kr = kc.rope(q, pos, model.rot), kc.rope(k, pos, model.rot)
    n = 10
    assert kc.select("window", n, qr, kr)[0, 0].tolist() == list(range(T - n, T))
    assert kc.select("sink", n, qr, kr)[0, 0].tolist() == [0, 1, 2, 3] + list(range(T - 6, T))
    h2o = kc.select("h2o", n, qr, kr)
    assert (h2o[..., -(n // 2):] == torch.arange(T - n // 2, T)).all()   # the recent half is always kept
    snap = kc.select("snapkv", n, qr, kr, obs=4)
    assert (snap[..., -4:] == torch.arange(T - 4, T)).all()              # the observation window is kept


def test_h2o_matches_a_plain_python_reference(setup):
    model, ids, (x, q, k, v) = setup
    pos = torch.arange(T)
    qr, kr = kc.rope(q, pos, model.rot), kc.rope(k, pos, model.rot)
    n, recent = 9, 4
    got = kc.select("h2o", n, qr, kr)
    for b in range(2):
        for h in range(model.h):
            keep, score = [], [0.0] * T
            for t in range(T):
                if len(keep) == n:
                    old = [j for j in keep if j < t - recent + 1]
                    keep.remove(min(old, key=lambda j: (score[j], j)))
                keep.append(t)
                s = torch.stack([qr[b, h, t] @ kr[b, h, j] for j in keep]) / math.sqrt(qr.shape[-1])
                for j, p in zip(keep, s.softmax(0).tolist()):
                    score[j] += p
            assert got[b, h].tolist() == sorted(keep)


@pytest.mark.parametrize("bits", (8, 4, 2))
@pytest.mark.parametrize("axis", ("token", "channel"))
def test_quantisation_error_within_half_step(bits, axis):
    x = torch.randn(3, 2, 32, 16) * torch.linspace(0.1, 8, 16)  # channels of very different ranges
    qz = kc.quantize(x, bits, axis, group=16)
    y = kc.dequantize(qz, axis, tuple(x.shape))
    err = (x - y).abs()
    half = (qz.scale / 2).expand(qz.shape)
    half = half if axis == "token" else half.transpose(-1, -2).reshape(x.shape)
    assert (err <= half + 1e-5 * x.abs().amax()).all()
    assert torch.equal(kc.unpack(kc.pack(kc.unpack(qz.codes, bits), bits), bits), kc.unpack(qz.codes, bits))
    assert qz.nbytes() == kc.quant_bytes(32, 2, 16, bits, bits, axis, axis, group=16) // 2 * 3


def test_stored_bytes_equal_formula():
    store = {}
    k = torch.randn(1, 2, 64, 32, generator=torch.Generator().manual_seed(2))
    q = kc.make_quant(4, 4, "channel", "token", group=16, store=store)
    q(k, "k"), q(k, "v")
    assert store["k"] + store["v"] == kc.quant_bytes(64, 2, 32, 4, 4, "channel", "token", group=16)
    assert kc.eviction_bytes(64, 2, 32) == 2 * 64 * 2 * 32 * 2
    # int4 per token, dh = 128 (Llama-like): 64 bytes of codes + 8 of scale and zero per vector, vs 256 at 16 bits
    assert kc.quant_bytes(1, 1, 128, 4, 4, "token", "token") == 2 * (64 + 8)
    y, nbytes = kc.fp8_roundtrip(k)
    assert nbytes == k.numel() + 4
    # e4m3: 3 mantissa bits, so half a step is 2^-4 of the value for normals; subnormals (below 2^-6 x scale)
    # have a fixed step of 2^-9 x scale, half of it 2^-10 x scale
    scale = k.abs().amax() / 448
    assert ((y - k).abs() <= k.abs() * 2 ** -4 + scale * 2 ** -10 + 1e-7).all()


def test_llama3_8b_bytes_per_token_quoted_on_the_page():
    # docs/framework/kv-cache-tiers.md quotes these (32 layers x 8 KV heads x head_dim 128, float32 scale and zero)
    per_tok = {name: 32 * kc.quant_bytes(4096, 8, 128, *s) // 4096 for name, s in kc.QUANT_SCHEMES.items()}
    assert 32 * kc.eviction_bytes(1, 8, 128) == 128 * 1024
    assert per_tok == {"int8 per-token": 68 * 1024, "int4 per-token": 36 * 1024, "int4 KIVI": 42 * 1024,
                       "int2 per-token": 20 * 1024, "int2 KIVI": 26 * 1024}
