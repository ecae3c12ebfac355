"""The numbers of docs/interview/model-structure.md: code/interview/structure_costs.py against the
formulas of code/algorithm/transformer_math.py, against the from-scratch model of
code/algorithm/tiny_transformer.py counted module by module, and the figures the page quotes."""
from __future__ import annotations

import math
import sys
from dataclasses import replace

import torch

from algorithm_helpers import load_listing
from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "interview"))
import structure_costs as sc  # noqa: E402

tm = sc.tm
tt = load_listing("algorithm_tiny_transformer", "tiny_transformer.py")
LLAMA3 = tm.PUBLISHED["Llama-3-8B"]
PAGE = ROOT / "docs" / "interview" / "model-structure.md"


def test_parts_add_up_to_the_formula_and_to_a_real_model():
    for c in tm.PUBLISHED.values():
        if c.kv_lora_rank is None and not c.qkv_bias:
            assert sum(sc.model_parts(c).values()) == tm.param_count(c)
    # the from-scratch model, counted module by module
    cfg = tm.Cfg(vocab_size=50, hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                 num_key_value_heads=2, intermediate_size=96)
    model = tt.TinyLM(50, d=48, n_layers=2, n_heads=6, n_kv_heads=2, d_ff=96)
    blk = model.blocks[0]
    counted = {"W_q": blk.attn.wq, "W_k": blk.attn.wk, "W_v": blk.attn.wv, "W_o": blk.attn.wo,
               "W_gate": blk.ffn.gate, "W_up": blk.ffn.up, "W_down": blk.ffn.down}
    parts = sc.block_parts(cfg)
    for name, module in counted.items():
        assert parts[name] == sum(p.numel() for p in module.parameters()), name
    assert parts["norms"] == blk.norm1.weight.numel() + blk.norm2.weight.numel()
    assert sum(sc.model_parts(cfg).values()) == sum(p.numel() for p in model.parameters())


def test_alternatives_are_what_the_changed_config_costs():
    alt = sc.alternatives(LLAMA3)
    mha = replace(LLAMA3, num_key_value_heads=LLAMA3.num_attention_heads)
    assert tm.kv_bytes_per_token(LLAMA3) + alt["MHA (n_kv = n_h)"]["kv_bytes_per_token"] == tm.kv_bytes_per_token(mha)
    # GQA removes exactly the K/V projections of the heads it shares: 2 d (n_h - n_kv) d_h per layer
    d, dh, L = LLAMA3.hidden_size, LLAMA3.d_head, LLAMA3.num_hidden_layers
    assert alt["MHA (n_kv = n_h)"]["params"] == L * 2 * d * (32 - 8) * dh
    # a LayerNorm adds one bias vector per norm: 2 per block and the final one
    ln = torch.nn.LayerNorm(d)
    assert sum(p.numel() for p in ln.parameters()) - d == d
    assert alt["LayerNorm (gain and bias)"]["params"] == (2 * L + 1) * d
    # tying removes the head's parameters but not its FLOPs (the head still multiplies)
    assert alt["tied embedding and LM head"]["matmul_flops_per_token"] == 0


def test_numbers_quoted_on_the_page():
    p = sc.block_parts(LLAMA3)
    assert (p["W_q"], p["W_k"], p["W_v"], p["W_o"]) == (16_777_216, 4_194_304, 4_194_304, 16_777_216)
    assert p["W_gate"] == p["W_up"] == p["W_down"] == 58_720_256 and p["norms"] == 8_192
    block = sum(p.values())
    assert block == 218_112_000
    ffn, attn = 3 * 58_720_256, 2 * 16_777_216 + 2 * 4_194_304
    assert (round(ffn / block * 100, 1), round(attn / block * 100, 1)) == (80.8, 19.2)
    m = sc.model_parts(LLAMA3)
    assert m["blocks"] == 6_979_584_000 and m["embedding"] == m["lm_head"] == 525_336_576
    total = tm.param_count(LLAMA3)
    assert total == 8_030_261_248 and round((m["embedding"] + m["lm_head"]) / total * 100, 1) == 13.1
    c = sc.cost(LLAMA3)
    assert c["matmul_flops_per_token"] == 15_009_316_864                       # ~15.0 GFLOP per token
    assert round(2 * 128256 * 4096 / c["matmul_flops_per_token"] * 100, 1) == 7.0  # the LM head's share

    alt = sc.alternatives(LLAMA3)
    assert alt["MHA (n_kv = n_h)"] == {"params": 805_306_368, "matmul_flops_per_token": 1_610_612_736,
                                       "kv_bytes_per_token": 393_216}
    assert round(805_306_368 / total * 100, 1) == 10.0
    assert round(805_306_368 / (total + 805_306_368) * 100) == 9     # "比 MHA 少 …（约 9%）"
    assert c["kv_bytes_per_token"] == 128 * 1024                                # 128 KiB
    assert c["kv_bytes_per_token"] + 393_216 == 512 * 1024                     # MHA: 512 KiB, 4x
    assert c["kv_bytes_per_token"] + alt["MQA (n_kv = 1)"]["kv_bytes_per_token"] == 16 * 1024   # MQA: 16 KiB
    assert alt["MQA (n_kv = 1)"]["params"] == -234_881_024
    mha, mqa = replace(LLAMA3, num_key_value_heads=32), replace(LLAMA3, num_key_value_heads=1)
    assert (tm.kv_cache_gib(mha, 8192), tm.kv_cache_gib(LLAMA3, 8192), tm.kv_cache_gib(mqa, 8192)) == (4.0, 1.0, 0.125)
    assert round(alt["MHA (n_kv = n_h)"]["matmul_flops_per_token"] / 1e9, 2) == 1.61
    assert round(alt["MQA (n_kv = 1)"]["matmul_flops_per_token"] / 1e9, 2) == -0.47
    # 16 and 4 KV heads: 256 and 64 KiB per token; a 128K-token sequence at 8 KV heads: 16 GiB
    assert [tm.kv_bytes_per_token(replace(LLAMA3, num_key_value_heads=k)) // 1024 for k in (16, 4)] == [256, 64]
    assert tm.kv_cache_gib(LLAMA3, 128 * 1024) == 16.0
    assert alt["GELU FFN, d_ff = 4d"]["params"] == -1_342_177_280 and round(1_342_177_280 / total * 100, 1) == 16.7
    assert alt["LayerNorm (gain and bias)"]["params"] == 266_240 and 266_240 / total < 1e-4
    assert alt["learned absolute positions"]["params"] == 33_554_432
    assert alt["tied embedding and LM head"]["params"] == -525_336_576 and round(525_336_576 / total * 100, 1) == 6.5

    # d_ff: 3.5 d, 14 x 1024; split 8 ways for tensor parallelism, 1792 = 14 x 128 per GPU
    assert LLAMA3.intermediate_size == 3.5 * 4096 == 14 * 1024 and 14336 // 8 == 1792 == 14 * 128
    # SwiGLU with d_ff = 8d/3 matches a 4d GELU FFN in parameters (8 d^2)
    assert 3 * 4096 * (8 * 4096 // 3) <= 8 * 4096**2 < 3 * 4096 * (8 * 4096 // 3 + 1)
    # decode attention intensity (bf16 K and V): each key of one KV head brings K and V, 2 x d_h x 2 bytes,
    # and serves g query heads with 2 d_h FLOPs for q.k and 2 d_h for p.v each: g FLOP/B, g = n_h / n_kv
    g, dh = LLAMA3.num_attention_heads // LLAMA3.num_key_value_heads, LLAMA3.d_head
    assert g == 4 and (g * (2 * dh + 2 * dh)) / (2 * dh * 2) == g
    # fp32 logits of one 8192-token batch: 8192 x 128256 x 4 bytes
    assert round(8192 * 128256 * 4 / 1e9, 1) == 4.2


def test_the_tuning_gpt_parameter_count_is_the_record():
    import json

    record = json.loads((ROOT / "data" / "records" / "nvidia-h200" / "tuning_ladder.json").read_text(encoding="utf-8"))
    sys.path.insert(0, str(ROOT / "code" / "stack"))
    import tuning

    with torch.device("meta"):
        model = tuning.GPT(tuning.GPU_SHAPE)
    assert sum(p.numel() for p in model.parameters()) == record["results"]["params"]


def test_page_embeds_the_listing_and_states_the_tested_figures():
    text = PAGE.read_text(encoding="utf-8")
    assert '--8<-- "code/interview/structure_costs.py:breakdown"' in text
    assert "参数比 MHA 少 805,306,368 个（约 9%）" in text
    for figure in ("218,112,000", "8,030,261,248", "805,306,368", "525,336,576", "1,342,177,280", "33,554,432",
                   "266,240", "80.8%", "13.1%", "128 KiB", "512 KiB", "16 KiB", "1792"):
        assert figure in text, figure
    assert math.isclose(tm.kv_cache_gib(LLAMA3, 8192), 1.0)
