"""code/algorithm/muon.py against torch.optim.Muon, torch.optim.AdamW, the SVD and the numbers quoted
on docs/algorithm/optimizers-at-scale.md."""
from __future__ import annotations

import math

import pytest
import torch

from algorithm_helpers import load_listing


mu = load_listing("algorithm_muon", "muon.py")
tt = load_listing("algorithm_tiny_transformer_muon", "tiny_transformer.py")


@pytest.mark.parametrize("shape", [(64, 128), (128, 64), (96, 96), (8, 300)])
def test_newton_schulz_equals_torch_muon_kernel(shape):
    from torch.optim._muon import _zeropower_via_newtonschulz

    G = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    ours = mu.newton_schulz(G)
    ref = _zeropower_via_newtonschulz(G, mu.MUON_COEFFS, 5, 1e-7)
    assert ours.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(ours, ref)                  # same bf16 operations in the same order


def _scalar_map(s, steps=5):
    a, b, c = mu.MUON_COEFFS
    for _ in range(steps):
        s = a * s + b * s ** 3 + c * s ** 5
    return s


def test_newton_schulz_keeps_singular_vectors_and_pushes_values_into_a_band():
    G = torch.randn(64, 160, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    X = mu.newton_schulz(G).double()
    # the result is U diag(p(S / |G|_F)) V^T with p the scalar quintic applied five times
    predicted = U @ torch.diag(_scalar_map(S / G.norm())) @ Vh
    assert (X - predicted).abs().max() < 0.03       # bf16 rounding
    sv = torch.linalg.svdvals(X)
    assert sv.min() > 0.6 and sv.max() < 1.25      # near 1, not equal to 1 (the coefficients overshoot)
    assert (X - mu.polar_factor(G)).norm() / mu.polar_factor(G).norm() < 0.25
    # cubic Newton-Schulz in float64 converges to U V^T itself
    X = G / G.norm()
    for _ in range(60):
        X = 1.5 * X - 0.5 * X @ X.T @ X
    torch.testing.assert_close(X, mu.polar_factor(G), rtol=0, atol=1e-10)


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_hand_muon_equals_torch_optim_muon(nesterov, adjust):
    g = torch.Generator().manual_seed(2)
    W = [torch.randn(48, 32, generator=g), torch.randn(32, 96, generator=g)]
    ours = [torch.nn.Parameter(w.clone()) for w in W]
    ref = [torch.nn.Parameter(w.clone()) for w in W]
    o1 = mu.Muon(ours, lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov, adjust_lr=adjust)
    o2 = torch.optim.Muon(ref, lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov, adjust_lr_fn=adjust)
    for _ in range(6):
        grads = [torch.randn(w.shape, generator=g) for w in W]
        for p, q, gr in zip(ours, ref, grads):
            p.grad, q.grad = gr.clone(), gr.clone()
        o1.step()
        o2.step()
        for p, q in zip(ours, ref):
            assert torch.equal(p, q)
    assert mu.state_bytes(o1) == mu.state_bytes(o2) == mu.muon_state_formula(48 * 32 + 32 * 96)
    with pytest.raises(ValueError):
        mu.Muon([torch.nn.Parameter(torch.zeros(5))])


def test_update_rms_after_moonshot_scaling_is_0_2():
    """An orthogonal m x n update (m <= n) has RMS 1/sqrt(n); 0.2 sqrt(max(m, n)) makes it 0.2."""
    for shape in ((64, 256), (256, 64), (128, 128)):
        O = mu.polar_factor(torch.randn(*shape, dtype=torch.float64))
        rms = O.pow(2).mean().sqrt().item()
        assert math.isclose(rms, 1 / math.sqrt(max(shape)), rel_tol=1e-9)
        assert math.isclose(rms * mu.Muon.lr_scale(shape, "match_rms_adamw"), 0.2, rel_tol=1e-9)


def test_ns_flop_overhead_below_t_m_over_b():
    for m, n in ((768, 3072), (4096, 14336), (16384, 53248)):
        for B in (2 ** 19, 2 ** 24):
            assert mu.ns_flop_overhead(m, n, 5, B) <= 5 * m / B
    assert round(5 * 768 / 2 ** 19 * 100, 2) == 0.73      # the page's example: under 1 %
    assert round(mu.ns_flop_overhead(768, 3072, 5, 2 ** 19) * 100, 2) == 0.55


def test_parameter_split_on_a_small_gpt():
    model = tt.TinyLM(64, d=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    muon_p, adamw_p = mu.muon_split(model)
    assert {id(p) for p in muon_p} == {id(m.weight) for b in model.blocks for m in b.modules()
                                       if isinstance(m, torch.nn.Linear)}
    assert id(model.embed.weight) in {id(p) for p in adamw_p} and id(model.lm_head.weight) in {id(p) for p in adamw_p}
    assert all(p.ndim == 1 for p in adamw_p if p is not model.embed.weight and p is not model.lm_head.weight)
    assert sum(p.numel() for p in muon_p + adamw_p) == sum(p.numel() for p in model.parameters())


def test_weight_decay_groups_reproduce_nanogpt_on_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16))
    params = list(model.parameters())                      # the tied lm_head appears once
    nanogpt_decay = {id(p) for p in params if p.dim() >= 2}  # nanoGPT's configure_optimizers rule
    decay, no_decay = mu.adamw_param_groups(model, 0.1, decay_embeddings=True)
    assert {id(p) for p in decay["params"]} == nanogpt_decay
    assert all(p.ndim == 1 for p in no_decay["params"])     # biases and LayerNorm gains/biases
    decay2, no_decay2 = mu.adamw_param_groups(model, 0.1)
    moved = {id(p) for p in no_decay2["params"]} - {id(p) for p in no_decay["params"]}
    assert moved == {id(model.transformer.wte.weight), id(model.transformer.wpe.weight)}
    n = sum(p.numel() for p in params)
    assert sum(p.numel() for g in (decay2, no_decay2) for p in g["params"]) == n


def test_adamw_state_bytes_formula_and_training_budget():
    model = tt.TinyLM(64, d=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    opt = torch.optim.AdamW(mu.adamw_param_groups(model, 0.1))
    model(torch.randint(0, 64, (2, 8))).sum().backward()
    opt.step()
    params = list(model.parameters())
    assert mu.state_bytes(opt) == mu.adamw_state_formula(sum(p.numel() for p in params), len(params))
    assert mu.training_bytes_per_param("adamw") == 16 and mu.training_bytes_per_param("muon") == 12


def test_fused_foreach_and_loop_adamw_agree_and_traffic():
    g = torch.Generator().manual_seed(3)
    base = [torch.randn(256, 64, generator=g) for _ in range(6)]
    n = sum(b.numel() for b in base)
    results, traffic = {}, {}
    for name, impl in (("loop", dict(foreach=False)), ("foreach", dict(foreach=True)), ("fused", dict(fused=True))):
        params = [torch.nn.Parameter(b.clone()) for b in base]
        traffic[name] = mu.adamw_step_traffic(params, **impl)
        results[name] = params
    for name in ("foreach", "fused"):
        for p, q in zip(results[name], results["loop"]):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    assert traffic["fused"].ops <= 2 and traffic["loop"].ops >= 8 * len(base)   # about ten ops per tensor
    assert traffic["foreach"].ops < traffic["loop"].ops / 2
    # fused: one pass that reads p, g, m, v (16 B per fp32 parameter, plus the step counters)
    assert abs(traffic["fused"].read / n - 16) < 0.01
    assert traffic["loop"].read + traffic["loop"].written > 2.5 * (traffic["fused"].read + 12 * n)


def test_mup_adam_learning_rate_scales_as_one_over_width():
    base = mu.adam_first_step_output_change(64, 1e-3)
    for width in (256, 1024):
        standard = mu.adam_first_step_output_change(width, 1e-3)
        mup = mu.adam_first_step_output_change(width, 1e-3 * 64 / width)
        assert 0.7 * width / 64 < standard / base < 1.3 * width / 64     # grows like the width
        assert 0.8 < mup / base < 1.25                                  # stays put


def test_noise_scale_two_batch_estimator_is_unbiased():
    """Linear regression: per-example gradients give tr(Sigma) and |G|^2 exactly; the estimator that
    only sees gradient norms at two batch sizes recovers them on average."""
    g = torch.Generator().manual_seed(4)
    N, d = 4096, 8
    X = torch.randn(N, d, generator=g, dtype=torch.float64)
    y = X @ torch.randn(d, generator=g, dtype=torch.float64) + 0.5 * torch.randn(N, generator=g, dtype=torch.float64)
    w = torch.zeros(d, dtype=torch.float64)
    per_example = (X @ w - y)[:, None] * X                    # gradient of (x.w - y)^2 / 2
    exact = mu.noise_scale_exact(per_example)
    b_small, b_big, trials = 8, 256, 4000
    sq = {}
    for b in (b_small, b_big):
        idx = torch.randint(0, N, (trials, b), generator=g)
        sq[b] = per_example[idx].mean(1).pow(2).sum(-1).mean().item()
    _, _, est = mu.noise_scale_two_batches(sq[b_small], b_small, sq[b_big], b_big)
    assert 0.85 * exact < est < 1.15 * exact
    assert mu.optimal_lr_and_gain(exact, exact) == 0.5                  # at B = B_noise: half of eps_max


def test_numbers_quoted_on_the_page():
    # AdamW step lower bound: 28 bytes per parameter, 7B parameters, 4.8 TB/s
    assert round(28 * 7e9 / 4.8e12 * 1e3) == 41
    assert 16 * 7e9 / 1e9 == 112
    # the small GPT of the lab: 22,656 hidden-matrix parameters and 2,208 others in 14 + 7 tensors
    model = tt.TinyLM(32, d=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=86)
    hidden, rest = mu.muon_split(model)
    n_h, n_r = sum(p.numel() for p in hidden), sum(p.numel() for p in rest)
    assert (n_h, n_r, len(hidden), len(rest)) == (22656, 2208, 14, 7)
    assert mu.adamw_state_formula(n_h + n_r, len(hidden) + len(rest)) == 198_996
    assert mu.muon_state_formula(n_h) + mu.adamw_state_formula(n_r, len(rest)) == 108_316
    # the traffic table: 8 tensors of 256 x 64
    g = torch.Generator().manual_seed(2)
    base = [torch.randn(256, 64, generator=g) for _ in range(8)]
    n = sum(b.numel() for b in base)
    rows = {}
    for name, impl in (("loop", dict(foreach=False)), ("foreach", dict(foreach=True)), ("fused", dict(fused=True))):
        c = mu.adamw_step_traffic([torch.nn.Parameter(b.clone()) for b in base], **impl)
        rows[name] = (c.ops, round(c.read / n), round(c.written / n))
    assert rows == {"loop": (80, 52, 32), "foreach": (26, 52, 32), "fused": (2, 16, 16)}
    # embedding rows never seen for 200 steps at lr 1e-2, wd 0.1
    assert round((1 - 1e-2 * 0.1) ** 200, 3) == 0.819
    # muP: one Adam step, widths 64 and 1024
    assert round(mu.adam_first_step_output_change(64, 1e-3), 3) == 0.057
    assert round(mu.adam_first_step_output_change(1024, 1e-3), 3) == 0.806
    # the band of the quintic after five steps, normalised singular values in [2e-3, 1]
    s = torch.logspace(math.log10(2e-3), 0, 2000, dtype=torch.float64)
    band = _scalar_map(s)
    assert round(band.min().item(), 2) == 0.68 and round(band.max().item(), 2) == 1.20


def test_hyperparameter_scaling_keeps_t_epoch():
    ref = dict(ref_tokens=1e9, ref_batch=2 ** 19, ref_lr=0.02, ref_wd=0.2)
    t_ref = ref["ref_batch"] / (ref["ref_lr"] * ref["ref_wd"] * ref["ref_tokens"])
    for D in (2e9, 8e9, 3.2e10):
        B, lr, wd = mu.scale_hyperparameters(D, **ref)
        assert B & (B - 1) == 0 and B >= ref["ref_batch"]                 # a power of two that grows with D
        assert math.isclose(B / (lr * wd * D), t_ref, rel_tol=1e-12)
    # doubling the data grows the batch by 2^0.383 = 1.30 before rounding
    assert round(2 ** 0.383, 2) == 1.30


def test_square_root_rule_keeps_adam_sde_per_epoch():
    """Noise-dominated Adam: the per-coordinate update is (lr sqrt(B) / sigma) G + lr * N(0, 1).
    Over N / B steps the drift is N lr G / (sigma sqrt(B)) and the noise variance N lr^2 / B; both are
    unchanged by B -> k B, lr -> sqrt(k) lr (Malladi et al. 2022), but not by lr -> k lr."""
    N, G, sigma = 1e6, 0.01, 1.0

    def per_epoch(B, lr):
        steps = N / B
        return steps * lr * math.sqrt(B) * G / sigma, steps * lr ** 2

    base = per_epoch(256, 1e-3)
    for k in (4, 16):
        assert all(math.isclose(a, b) for a, b in zip(per_epoch(256 * k, 1e-3 * math.sqrt(k)), base))
        assert not math.isclose(per_epoch(256 * k, 1e-3 * k)[1], base[1])
