"""code/algorithm/efficient_attention.py against torch's SDPA, transformers' MambaMixer and model
configs, and the numbers quoted on docs/algorithm/efficient-attention.md."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from algorithm_helpers import load_listing


ea = load_listing("algorithm_efficient_attention", "efficient_attention.py")
F64 = dict(dtype=torch.float64)


def _qkv(B=2, H=3, T=37, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, B, H, T, d, generator=g, **F64).unbind(0)


@pytest.mark.parametrize("window", [1, 4, 16, 37, 64])
def test_local_attention_equals_sdpa_with_band_mask(window):
    q, k, v = _qkv()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=ea.band_mask(q.shape[-2], window))
    torch.testing.assert_close(ea.local_attention(q, k, v, window), ref, rtol=0, atol=1e-12)
    if window >= q.shape[-2]:                      # a window as long as the sequence is plain causal
        full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(ref, full, rtol=0, atol=1e-12)


def test_rolling_buffer_decode_equals_full_recompute_with_gqa():
    B, H, n_kv, T, d, w = 2, 4, 2, 30, 8, 7
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, T, d, generator=g, **F64)
    k, v = torch.randn(2, B, n_kv, T, d, generator=g, **F64).unbind(0)
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                         attn_mask=ea.band_mask(T, w))
    cache = ea.RollingKVCache(B, n_kv, w, d, dtype=torch.float64)
    for t in range(T):
        cache.append(k[:, :, t], v[:, :, t])
        torch.testing.assert_close(cache.attend(q[:, :, t]), ref[:, :, t], rtol=0, atol=1e-12)
        assert cache.nbytes() == 2 * B * n_kv * w * d * 8          # never grows past the window


@pytest.mark.parametrize("n_layers,window", [(1, 5), (3, 4), (4, 8)])
def test_receptive_field_of_stacked_windows(n_layers, window):
    """The last output depends on exactly the last n (w - 1) + 1 inputs: checked with autograd
    through a stack of random sliding-window attention layers."""
    T, d = 64, 8
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 1, T, d, generator=g, **F64, requires_grad=True)
    h = x
    for _ in range(n_layers):
        wq, wk, wv = (torch.randn(3, d, d, generator=g, **F64) / math.sqrt(d)).unbind(0)
        h = h + ea.local_attention(h @ wq, h @ wk, h @ wv, window)
    h[0, 0, -1].sum().backward()
    reached = (x.grad[0, 0].abs().sum(-1) > 0).nonzero().flatten()
    assert reached.numel() == ea.receptive_field(n_layers, window)
    assert reached.min().item() == T - ea.receptive_field(n_layers, window)


def test_linear_attention_parallel_recurrent_chunked_agree():
    q, k, v = _qkv(T=45)
    par = ea.linear_attention_parallel(q, k, v)
    torch.testing.assert_close(ea.linear_attention_recurrent(q, k, v), par, rtol=0, atol=1e-12)
    for chunk in (1, 8, 16, 45):
        torch.testing.assert_close(ea.linear_attention_chunked(q, k, v, chunk), par, rtol=0, atol=1e-12)


def test_linear_attention_state_does_not_grow():
    """The decoding state is S (d_k x d_v) plus z (d_k) per head, whatever T is."""
    for T in (4, 64):
        q, k, v = _qkv(B=1, H=2, T=T, d=8)
        S = torch.einsum("bhtk,bhtv->bhkv", ea.elu_feature_map(k), v)
        z = ea.elu_feature_map(k).sum(2)
        assert S.numel() + z.numel() == 2 * (8 * 8 + 8)
        c = ea.Layers(linear=1, lin_heads=2, lin_dk=8, lin_dv=8)
        assert ea.cache_bytes(c, T, p=8) == S.nbytes + z.nbytes
        # the last output computed from (S, z) alone equals the parallel form's last row
        fq = ea.elu_feature_map(q[:, :, -1])
        last = torch.einsum("bhk,bhkv->bhv", fq, S) / (fq * z).sum(-1, keepdim=True)
        torch.testing.assert_close(last, ea.linear_attention_parallel(q, k, v)[:, :, -1], rtol=0, atol=1e-12)


def test_exp_kernel_is_softmax_attention():
    """Kernel view (Katharopoulos eq. 2-3): sim(q, k) = exp(q.k) gives softmax attention exactly."""
    q, k, v = _qkv(T=20)
    a = torch.exp(q @ k.transpose(-1, -2)).tril()
    ours = (a @ v) / a.sum(-1, keepdim=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("T", [1, 2, 3, 8, 13, 64, 100])
def test_parallel_scans_equal_sequential(T):
    g = torch.Generator().manual_seed(T)
    a = torch.rand(2, T, 4, 3, generator=g, **F64)
    b = torch.randn(2, T, 4, 3, generator=g, **F64)
    ref = ea.scan_sequential(a, b)
    torch.testing.assert_close(ea.scan_hillis_steele(a, b), ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(ea.scan_blelloch(a, b), ref, rtol=0, atol=1e-12)


def test_combine_is_associative_not_commutative():
    g = torch.Generator().manual_seed(3)
    x, y, z = [tuple(torch.randn(2, 5, generator=g, **F64).unbind(0)) for _ in range(3)]
    l1 = ea.combine(ea.combine(x, y), z)
    l2 = ea.combine(x, ea.combine(y, z))
    for u, w in zip(l1, l2):
        torch.testing.assert_close(u, w, rtol=0, atol=1e-12)
    assert not torch.allclose(ea.combine(x, y)[1], ea.combine(y, x)[1])


def _ssm_inputs(b=2, L=23, D=6, N=4, seed=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, L, D, generator=g, **F64)
    delta = F.softplus(torch.randn(b, L, D, generator=g, **F64))
    A = -(torch.rand(D, N, generator=g, **F64) + 0.1)
    B, C = torch.randn(2, b, L, N, generator=g, **F64).unbind(0)
    Dskip = torch.randn(D, generator=g, **F64)
    return x, delta, A, B, C, Dskip


def test_selective_scan_parallel_equals_sequential():
    args = _ssm_inputs()
    ref = ea.selective_scan_sequential(*args)
    for scan in (ea.scan_blelloch, ea.scan_hillis_steele):
        torch.testing.assert_close(ea.selective_scan_parallel(*args, scan=scan), ref, rtol=0, atol=1e-12)


def test_time_invariant_ssm_is_a_convolution_selective_is_not():
    x, delta, A, B, C, Dskip = _ssm_inputs()
    b, L, D = x.shape
    const = torch.full((b, L, D), 0.3, **F64)
    Bc, Cc = B[:1, :1].expand(b, L, -1), C[:1, :1].expand(b, L, -1)
    dA, dB = ea.discretize(const[:1, :1], A, B[:1, :1])
    conv = ea.lti_convolution(x, dA[0, 0], dB[0, 0], C[0, 0], Dskip)
    torch.testing.assert_close(conv, ea.selective_scan_sequential(x, const, A, Bc, Cc, Dskip), rtol=0, atol=1e-12)
    # with input-dependent delta, B, C a single kernel no longer reproduces the layer
    dA0, dB0 = ea.discretize(delta[:1, :1], A, B[:1, :1])
    wrong = ea.lti_convolution(x, dA0[0, 0], dB0[0, 0], C[0, 0], Dskip)
    assert (wrong - ea.selective_scan_sequential(x, delta, A, B, C, Dskip)).abs().max() > 0.1


def test_ssd_quadratic_form_equals_recurrence():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 33, 5, generator=g, **F64)
    a = torch.rand(2, 33, generator=g, **F64) * 0.5 + 0.5
    B, C = torch.randn(2, 2, 33, 4, generator=g, **F64).unbind(0)
    torch.testing.assert_close(ea.ssd_quadratic(x, a, B, C), ea.ssd_recurrent(x, a, B, C), rtol=0, atol=1e-12)


def test_selective_ssm_matches_transformers_mamba_mixer_and_decodes():
    from transformers import MambaConfig, logging
    from transformers.models.mamba.modeling_mamba import MambaMixer

    logging.set_verbosity_error()
    torch.manual_seed(6)
    ours = ea.SelectiveSSM(16, d_state=4, expand=2, d_conv=4, dt_rank=2)
    cfg = MambaConfig(hidden_size=16, state_size=4, expand=2, conv_kernel=4, time_step_rank=2,
                      num_hidden_layers=1)
    ref = MambaMixer(cfg, 0).eval()
    ref.load_state_dict(ours.state_dict())          # same parameter names and shapes
    u = torch.randn(2, 13, 16)
    with torch.no_grad():
        y = ours(u)
        # transformers casts A to float32 inside its scan; both run in float32 here
        torch.testing.assert_close(y, ref(u), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ours(u, scan=ea.scan_hillis_steele), y, rtol=1e-5, atol=1e-6)
        state = ours.init_state(2)
        steps = []
        for t in range(u.shape[1]):
            o, state = ours.step(u[:, t], state)
            steps.append(o)
        torch.testing.assert_close(torch.stack(steps, 1), y, rtol=1e-5, atol=1e-6)
    conv_tail, h = state
    c = ea.Layers(ssm=1, ssm_inner=ours.E, ssm_state=ours.N, d_conv=ours.k)
    assert conv_tail.nbytes + h.nbytes == 2 * ea.cache_bytes(c, T=13, p=4)   # batch of 2, float32


def test_cache_formula_counts_rolling_buffer_bytes():
    for T in (1, 5, 7, 20):
        cache = ea.RollingKVCache(1, 2, 7, 16, dtype=torch.bfloat16)
        for _ in range(T):
            cache.append(torch.zeros(1, 2, 16), torch.zeros(1, 2, 16))
        # the buffer is allocated at full size; the formula counts the tokens it holds
        used = 2 * 2 * min(T, 7) * 16 * 2
        assert ea.cache_bytes(ea.Layers(sliding=1, n_kv=2, d_head=16, window=7), T) == used
        assert cache.nbytes() == ea.cache_bytes(ea.Layers(sliding=1, n_kv=2, d_head=16, window=7), 7)


def test_models_match_transformers_configs():
    from transformers import JambaConfig, MistralConfig, Qwen3NextConfig

    m = MistralConfig()
    mis = ea.MODELS["Mistral-7B (SWA 4096)"]
    assert (mis.sliding, mis.n_kv, mis.d_head, mis.window) == (
        m.num_hidden_layers, m.num_key_value_heads, m.head_dim, m.sliding_window)
    j = JambaConfig()
    jam = ea.MODELS["Jamba-v0.1 (1:7)"]
    attn = [i for i in range(j.num_hidden_layers) if i % j.attn_layer_period == j.attn_layer_offset]
    assert jam.full == len(attn) == 4 and jam.ssm == j.num_hidden_layers - len(attn)
    assert jam.n_kv == j.num_key_value_heads and jam.d_head == j.hidden_size // j.num_attention_heads
    assert (jam.ssm_inner, jam.ssm_state, jam.d_conv) == (j.mamba_expand * j.hidden_size, j.mamba_d_state, j.mamba_d_conv)
    qn = Qwen3NextConfig()
    qwen = ea.MODELS["Qwen3-Next-80B-A3B (3:1)"]
    assert qwen.full == qn.layer_types.count("full_attention") == 12
    assert qwen.linear == qn.layer_types.count("linear_attention") == 36
    assert (qwen.n_kv, qwen.d_head) == (qn.num_key_value_heads, qn.head_dim)
    assert (qwen.lin_heads, qwen.lin_dk, qwen.lin_dv) == (qn.linear_num_value_heads, qn.linear_key_head_dim,
                                                           qn.linear_value_head_dim)
    assert qwen.lin_conv_channels == 2 * qn.linear_num_key_heads * qn.linear_key_head_dim + \
        qn.linear_num_value_heads * qn.linear_value_head_dim
    assert qwen.d_conv == qn.linear_conv_kernel_dim


def test_numbers_quoted_on_the_page():
    GiB, T256, T32 = 2 ** 30, 256 * 1024, 32 * 1024
    M = {name: ea.cache_bytes(c, T256) for name, c in ea.MODELS.items()}
    # Jamba paper, Table 1 (256K context, 16-bit): Llama-2 128 GB, Mistral 32 GB, Jamba 4 GB of KV
    assert M["Llama-2-7B (full)"] == 128 * GiB and M["Mistral-7B (full)"] == 32 * GiB
    jamba = ea.MODELS["Jamba-v0.1 (1:7)"]
    assert ea.cache_bytes(jamba, T256) - ea.cache_bytes(jamba, 0) == 4 * GiB
    assert ea.cache_bytes(jamba, 0) == 28 * 8192 * (16 + 3) * 2 == 8_716_288      # Mamba states, bf16
    # Mistral 7B paper: at 32K tokens the rolling buffer uses 8x less cache memory
    assert ea.cache_bytes(ea.MODELS["Mistral-7B (full)"], T32) == 8 * ea.cache_bytes(ea.MODELS["Mistral-7B (SWA 4096)"], T32)
    assert ea.cache_bytes(ea.MODELS["Mistral-7B (SWA 4096)"], T32) == GiB // 2
    assert ea.receptive_field(32, 4096) == 131_041        # the paper rounds 32 x 4096 to "about 131K"
    qwen = ea.MODELS["Qwen3-Next-80B-A3B (3:1)"]
    assert ea.cache_bytes(qwen, 1) - ea.cache_bytes(qwen, 0) == 24 * 1024          # KV per token
    assert ea.cache_bytes(qwen, 0) == 36 * (32 * 128 * 128 + 8192 * 3) * 2 == 39_518_208
    assert ea.cache_bytes(qwen, T256) - ea.cache_bytes(qwen, 0) == 6 * GiB
    # NSA, Table 4: 64K context, expected decoding speed-up 11.6x from the tokens loaded
    # the table "代入各模型的配置": KV per token (KiB), fixed state (MiB), totals at 32K and 256K (GiB)
    table = {
        "Llama-2-7B (full)": (512, 0.0, 16.0, 128.0),
        "Mistral-7B (full)": (128, 0.0, 4.0, 32.0),
        "Mistral-7B (SWA 4096)": (128, 0.0, 0.5, 0.5),
        "Jamba-v0.1 (1:7)": (16, 8.3, 0.51, 4.01),
        "Qwen3-Next-80B-A3B (3:1)": (24, 37.7, 0.79, 6.04),
    }
    for name, (kib, mib, g32, g256) in table.items():
        c = ea.MODELS[name]
        assert (ea.cache_bytes(c, 1) - ea.cache_bytes(c, 0)) / 1024 == kib
        assert round(ea.cache_bytes(c, 0) / 2 ** 20, 1) == mib
        assert round(ea.cache_bytes(c, T32) / GiB, 2) == g32 and round(ea.cache_bytes(c, T256) / GiB, 2) == g256
    # DSA's indexer key adds 132 bytes to MLA's 1152 per token and layer: about 11 %
    assert round(132 / 1152, 2) == 0.11
    table4 = {8192: (2048, 4.0), 16384: (2560, 6.4), 32768: (3584, 9.1), 65536: (5632, 11.6)}
    for T, (tokens, speedup) in table4.items():
        assert ea.nsa_tokens_read(T) == tokens and round(T / tokens, 1) == speedup
    # DSA at 128K: bytes read per decoding step and layer against dense MLA
    assert round(131072 * 1152 / ea.dsa_bytes_read(131072), 2) == 7.68
    assert ea.dsa_bytes_read(1000) == 1000 * (132 + 1152)      # shorter than k: reads everything and more
