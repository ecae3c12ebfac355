"""code/algorithm/transformer_math.py and tiny_transformer.py against PyTorch, Hugging Face
models built on the meta device from published configs, and hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from algorithm_helpers import load_listing
from conftest import ROOT


tm = load_listing("algorithm_transformer_math", "transformer_math.py")
tt = load_listing("algorithm_tiny_transformer", "tiny_transformer.py")


def _hf_count(name):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    c = tm.PUBLISHED[name]
    kw = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
              num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
              intermediate_size=c.intermediate_size, tie_word_embeddings=c.tie_word_embeddings)
    cfg_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if name.startswith("Qwen") else (LlamaConfig, LlamaForCausalLM)
    with torch.device("meta"):
        model = model_cls(cfg_cls(**kw))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["Llama-2-70B", "Llama-3-8B", "Qwen2.5-7B"])
def test_param_count_equals_hf_model(name):
    assert tm.param_count(tm.PUBLISHED[name]) == _hf_count(name)


BERT_SHAPES = {  # Devlin et al. 2019, section 3: L, H, A; d_ff = 4H (footnote 3)
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}


@pytest.mark.parametrize("size", ["base", "large"])
def test_bert_param_count_equals_hf_bert_model(size):
    transformers = pytest.importorskip("transformers")
    shape = BERT_SHAPES[size]
    with torch.device("meta"):   # no weights allocated, nothing downloaded
        model = transformers.BertModel(transformers.BertConfig(**shape))
    n = sum(p.numel() for p in model.parameters())
    formula = tm.bert_param_count(**{k: v for k, v in shape.items() if k != "num_attention_heads"})
    assert formula == n
    # the numbers quoted on docs/algorithm/classic-networks.md ("110M" and "340M" in the paper)
    assert n == {"base": 109_482_240, "large": 335_141_888}[size]


def test_bert_base_breakdown_on_the_page():
    d, L, V, f = 768, 12, 30522, 3072
    assert (V + 512 + 2) * d + 2 * d == 23_837_184                          # embeddings + LayerNorm
    assert L * (4 * d * d + 2 * d * f + f + 9 * d) == 85_054_464             # 12 encoder blocks
    assert d * d + d == 590_592                                              # pooler
    assert tm.bert_param_count(pooler=False) == 109_482_240 - 590_592
    n_mm = L * (4 * d * d + 2 * d * f)                                       # weights in a matmul
    assert n_mm == 84_934_656 and 4 * L * 512 * d == 18_874_368              # 2 N_mm, attention at T = 512


def test_published_param_counts_and_kv_bytes():
    P = tm.PUBLISHED
    assert tm.param_count(P["Llama-3-8B"]) == 8_030_261_248
    assert tm.param_count(P["Llama-2-70B"]) == 68_976_648_192
    # bf16 KV cache per token, by hand: 2 (K, V) * layers * kv heads * d_h * 2 bytes
    assert tm.kv_bytes_per_token(P["Llama-2-70B"]) == 2 * 80 * 8 * 128 * 2 == 327_680
    assert tm.kv_bytes_per_token(P["Llama-3-8B"]) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert tm.kv_bytes_per_token(P["Qwen2.5-7B"]) == 2 * 28 * 4 * 128 * 2 == 57_344
    assert tm.kv_bytes_per_token(P["DeepSeek-V2"]) == (512 + 64) * 60 * 2 == 69_120
    assert tm.kv_bytes_per_token(P["DeepSeek-V3"]) == (512 + 64) * 61 * 2 == 70_272
    # MLA caches 4.5 d_h per layer (DeepSeek-V2 paper, Table 1)
    assert (512 + 64) / 128 == 4.5
    # Llama-2-70B with full MHA (64 KV heads) would need 8x the cache
    mha = tm.Cfg(32000, 8192, 80, 64, 64, 28672)
    assert tm.kv_bytes_per_token(mha) == 8 * tm.kv_bytes_per_token(P["Llama-2-70B"])
    assert math.isclose(tm.kv_cache_gib(P["Llama-3-8B"], 8192), 1.0)


def test_attention_matches_sdpa():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 7, 16).unbind(0)
    for causal in (True, False):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(tt.attention(q, k, v, causal), ref, atol=1e-5, rtol=1e-5)


def test_score_variance_scaling():
    torch.manual_seed(0)
    for d_k in (16, 256):
        q, k = torch.randn(2, 200_000, d_k).unbind(0)
        s = (q * k).sum(-1)
        assert abs(s.var().item() / tm.init_variance_of_scores(d_k, False) - 1) < 0.03
        assert abs((s / math.sqrt(d_k)).var().item() - tm.init_variance_of_scores(d_k, True)) < 0.03


def _normal_order_statistics(n):
    """E[max] and E[max - second] of n independent standard normals, by numerical integration:
    E[X_(n)] = int x n phi(x) Phi(x)^(n-1) dx and E[X_(n) - X_(n-1)] = n int Phi(x)^(n-1) (1 - Phi(x)) dx."""
    x = torch.linspace(-12, 12, 480_001, dtype=torch.float64)
    dx = (x[1] - x[0]).item()
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    pdf = torch.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi)
    top = (x * n * pdf * cdf ** (n - 1)).sum().item() * dx
    gap = (n * cdf ** (n - 1) * (1 - cdf)).sum().item() * dx
    return top, gap


def test_why_unscaled_softmax_saturates():
    """The page's account of saturation at d_k = 128 with n = 4096 keys: the top logit stands about
    3.6 sigma (about 41) above the typical one, while the top two are only about 0.26 sigma (2.9) apart,
    which still leaves the top key most of the mass."""
    d_k, n = 128, 4096
    sigma = math.sqrt(d_k)
    top, gap = _normal_order_statistics(n)
    assert round(top, 2) == 3.63 and round(top * sigma) == 41
    assert round(gap, 2) == 0.26 and round(gap * sigma, 1) == 2.9
    assert round(math.log10(math.exp(-41))) == -18 and round(math.exp(2.9)) == 18

    torch.manual_seed(0)
    s = torch.randn(1000, n, dtype=torch.float64) * sigma          # unscaled logits q.k
    two = s.topk(2, dim=-1).values
    assert abs((two[:, 0].mean().item() - top * sigma)) < 0.2         # sampling agrees with the integral
    assert abs((two[:, 0] - two[:, 1]).mean().item() - gap * sigma) < 0.2
    assert round((two[:, 0] - two[:, 1]).median().item(), 1) == 2.0
    p = torch.softmax(s, dim=-1)
    top2 = p.topk(2, dim=-1).values
    assert round(top2[:, 0].mean().item(), 2) == 0.76                 # mean share of the top key
    assert round(top2[:, 0].median().item(), 2) == 0.82
    assert round(top2.sum(-1).mean().item(), 1) == 0.9                 # the top two together
    assert (1 / (p ** 2).sum(-1)).mean().item() < 2                    # effective number of keys
    scaled = torch.softmax(s / sigma, dim=-1)
    assert round(scaled.max(-1).values.mean().item(), 3) == 0.006
    effective = (1 / (scaled ** 2).sum(-1)).mean().item()
    assert abs(effective / (n / math.e) - 1) < 0.02 and round(effective, -2) == 1500

    # the gradient to logit j carries the factor p_j: diag(p) - p p^T applied to dL/dp
    g = torch.randn(n, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), s[0])
    torch.testing.assert_close(jac @ g, p[0] * (g - (p[0] * g).sum()))

    text = (ROOT / "docs" / "algorithm" / "transformer.md").read_text(encoding="utf-8")
    for quoted in ("3.63", "3.63\\sigma \\approx 41", "0.26\\sigma \\approx 2.9", "中位数约 2.0", "约 76%",
                   "中位数约 82%", "约 90%", "约 0.6%", "n/e \\approx 1500", "e^{-41} \\approx 10^{-18}",
                   "e^{2.9} \\approx 18"):
        assert quoted in text, quoted
    assert "最大项与次大项差几个标准差" not in text


def test_gqa_with_all_kv_heads_is_mha_and_mqa_shares_one_head():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 32)
    cos, sin = tt.rope_cos_sin(torch.arange(5), 8)
    gqa = tt.Attention(32, 4, 4)
    mha = torch.nn.MultiheadAttention(32, 4, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([gqa.wq.weight, gqa.wk.weight, gqa.wv.weight]))
        mha.out_proj.weight.copy_(gqa.wo.weight)
    no_rope = (torch.ones(5, 8), torch.zeros(5, 8))          # cos = 1, sin = 0: identity rotation
    mask = torch.ones(5, 5, dtype=torch.bool).triu(1)
    ref, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    torch.testing.assert_close(gqa(x, *no_rope), ref, atol=1e-5, rtol=1e-5)
    # MQA: one K/V head; its cache is n_h times smaller than MHA's
    mqa = tt.Attention(32, 4, 1)
    cache = {}
    mqa(x, cos, sin, cache)
    assert cache["k"].shape == (2, 1, 5, 8)


def test_kv_cache_decoding_equals_full_recompute_and_bytes_match_formula():
    torch.manual_seed(0)
    model = tt.TinyLM(vocab=50, d=64, n_layers=3, n_heads=8, n_kv_heads=2, d_ff=96).eval()
    prompt = torch.randint(0, 50, (2, 6))
    seq, caches = model.generate(prompt, 10)
    with torch.no_grad():
        full = model(seq)
    # greedy choices from one full pass agree with the incremental ones
    assert torch.equal(full[:, 5:-1].argmax(-1), seq[:, 6:])
    with torch.no_grad():
        c2 = [{} for _ in model.blocks]
        model(seq[:, :8], c2, 0)
        step = model(seq[:, 8:9], c2, 8)
    torch.testing.assert_close(step[:, 0], full[:, 8], atol=1e-5, rtol=1e-5)
    cfg = tm.Cfg(50, 64, 3, 8, 2, 96)
    n_tok = seq.shape[1]                    # prompt + every generated token went through the model
    cache_bytes = sum(c[t].nbytes for c in caches for t in ("k", "v"))
    assert cache_bytes == 2 * n_tok * tm.kv_bytes_per_token(cfg, bytes_per_elem=4)


def test_rope_is_relative():
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, 1, 16).unbind(0)

    def score(m, n):
        cm, sm = tt.rope_cos_sin(torch.tensor([m]), 16)
        cn, sn = tt.rope_cos_sin(torch.tensor([n]), 16)
        return (tt.apply_rope(q, cm, sm) * tt.apply_rope(k, cn, sn)).sum().item()

    assert math.isclose(score(3, 1), score(103, 101), rel_tol=1e-4)
    assert math.isclose(score(0, 0), (q * k).sum().item(), rel_tol=1e-5)


def test_params_and_flops_formulas_equal_counts():
    from torch.utils.flop_counter import FlopCounterMode

    cfg = tm.Cfg(vocab_size=40, hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=3, intermediate_size=80)
    model = tt.TinyLM(40, d=48, n_layers=2, n_heads=6, n_kv_heads=3, d_ff=80)
    assert tm.param_count(cfg) == sum(p.numel() for p in model.parameters())
    x = torch.randint(0, 40, (3, 11))
    with FlopCounterMode(display=False) as fc:
        model(x)
    assert fc.get_total_flops() == tm.forward_flops(cfg, 11, batch=3)


def test_train_flops_6nd():
    # Chinchilla (70B params, 1.4T tokens): 6ND = 5.88e23 FLOPs
    assert math.isclose(tm.train_flops(70e9, 1.4e12), 5.88e23)


def test_numbers_quoted_on_the_page():
    P = tm.PUBLISHED
    c = P["Llama-3-8B"]
    assert tm.matmul_params(c) == 7_504_658_432                 # 2N ~ 15.0 GFLOP per token
    # attention term at T = 8192 with the full score matrix: 4 n_layer T n_h d_h per token
    attn_per_tok = tm.forward_flops(c, 8192) / 8192 - 2 * tm.matmul_params(c)
    assert attn_per_tok == 4 * 32 * 8192 * 4096 == 4_294_967_296
    gib_32k = {k: round(tm.kv_cache_gib(P[k], 32768), 2) for k in P}
    assert gib_32k == {"Llama-2-70B": 10.0, "Llama-3-8B": 4.0, "Qwen2.5-7B": 1.75,
                       "DeepSeek-V2": 2.11, "DeepSeek-V3": 2.14}
    # the same DeepSeek-V3 shape with plain MHA: 128 heads of K and V, d_h = 128
    mha_v3 = 2 * 61 * 128 * 128 * 2
    assert mha_v3 == 3_997_696 and round(mha_v3 / tm.kv_bytes_per_token(P["DeepSeek-V3"]), 1) == 56.9
    # SwiGLU with d_ff = 8d/3 has the parameters of a 4d two-matrix FFN
    d = 3072
    assert 3 * d * (8 * d // 3) == 2 * d * (4 * d)
    # GPT-style N ~ 12 n_layer d^2 and the attention/weight FLOP ratio T / (12 d)
    assert 4_294_967_296 / 2 / (2 * tm.matmul_params(c)) < 0.15
