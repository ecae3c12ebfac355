"""The case-study pages of docs/interview/ (project-deep-dive, case-grid-sample, case-quantization, case-tuning).

Measured numbers on those pages are {{bench ...}} / {{record ...}} tokens, computed at build time and checked by
tests/test_measured_prose.py. What remains in prose are (a) settings and assertions of the labs the pages cite
(a tolerance, a threshold a lab asserts, a benchmark parameter) and (b) a few facts read from a record that a
token cannot express (the step at which the loss spikes). This test ties each of them to its source, so a page
cannot keep quoting a lab or a record that has changed."""
from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT

DOCS = ROOT / "docs" / "interview"
TUNING = json.loads((ROOT / "data" / "records" / "nvidia-h200" / "tuning_ladder.json").read_text(encoding="utf-8"))


def _source(rel: str) -> str:
    path = ROOT / rel
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return "\n".join("".join(c["source"]) for c in nb["cells"])
    return path.read_text(encoding="utf-8")


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


# (page, words on the page, file they come from, text that must be in that file)
CLAIMS = [
    # grid_sample: the lab's checks, kernel shapes and benchmark
    ("case-grid-sample.md", "在 float64 下与 `F.grid_sample` 的差在 $10^{-12}$ 以内", "notebooks/operator/grid-sample-lab.ipynb",
     "np.testing.assert_allclose(mine, ref, rtol=0, atol=1e-12)"),
    ("case-grid-sample.md", "3 种插值 × 3 种填充 × 2 种 `align_corners`", "notebooks/operator/grid-sample-lab.ipynb",
     'for mode in ("bilinear", "nearest", "bicubic"):'),
    ("case-grid-sample.md", "64 个像素 × 32 个通道", "notebooks/operator/grid-sample-lab.ipynb", "BLOCK=256, BLOCK_P=64, BLOCK_C=32"),
    ("case-grid-sample.md", "一个程序实例 256 个像素", "notebooks/operator/grid-sample-lab.ipynb", "BLOCK=256, BLOCK_P=64, BLOCK_C=32"),
    ("case-grid-sample.md", "$10^{-5} + 8 \\max(H, W)\\, 2^{-24} \\max|x|$", "notebooks/operator/grid-sample-lab.ipynb",
     "return 1e-5 + 8 * max(H, W) * 2.0**-24 * x.abs().max().item()"),
    ("case-grid-sample.md", "旋转 15°、缩放 0.9", "notebooks/operator/grid-sample-lab.ipynb", "angle = math.radians(15.0)"),
    ("case-grid-sample.md", "$N = 8$，$C = 64$，fp32", "notebooks/operator/grid-sample-lab.ipynb", "N, C = 8, 64"),
    ("case-grid-sample.md", "`rtol = atol = 1e-5`", "notebooks/operator/grid-sample-lab.ipynb",
     "torch.testing.assert_close(torch.from_numpy(mine).double(), xr.grad, rtol=1e-5, atol=1e-5)"),
    # quantization: what the labs assert
    ("case-quantization.md", "opset 14 导出", "code/framework/ort_levels.py", "opset: int = 14"),
    ("case-quantization.md", "`rtol=1e-4, atol=1e-5`", "notebooks/framework/onnx-runtime.ipynb",
     "np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)"),
    ("case-quantization.md", "`BiasGelu`", "notebooks/framework/onnx-runtime.ipynb", 'ext["com.microsoft:BiasGelu"] == 1'),
    ("case-quantization.md", "`FusedConv`", "notebooks/framework/onnx-runtime.ipynb", 'ext["com.microsoft:FusedConv"] == 1'),
    ("case-quantization.md", "整数码不一致的比例不超过 $10^{-3}$ 且差值至多 1", "notebooks/algorithm/ptq-vs-qat.ipynb",
     "assert worst <= 1e-3"),
    ("case-quantization.md", "整数码不一致的比例不超过 $10^{-3}$ 且差值至多 1", "notebooks/algorithm/ptq-vs-qat.ipynb",
     "assert diff.max() <= 1"),
    ("case-quantization.md", "预测一致不少于 99.9%", "notebooks/algorithm/ptq-vs-qat.ipynb", "assert agree >= 0.999"),
    ("case-quantization.md", "8 位 PTQ 与 fp32 的精度相差不到 1 个百分点", "notebooks/algorithm/ptq-vs-qat.ipynb",
     'assert table[(8, 8, "PTQ min-max")] >= acc_fp32 - 0.01'),
    ("case-quantization.md", "3 位时 QAT 不差于两种 PTQ 中较好的一个", "notebooks/algorithm/ptq-vs-qat.ipynb",
     'assert table[(3, 3, "QAT")] >= best_ptq[(3, 3)]'),
    ("case-quantization.md", "至少高 5 个百分点", "notebooks/algorithm/ptq-vs-qat.ipynb",
     'assert table[(2, 4, "QAT")] >= best_ptq[(2, 4)] + 0.05'),
    ("case-quantization.md", "带 0.05% 离群值的拉普拉斯分布", "notebooks/algorithm/quantization-basics.ipynb",
     "outlier = torch.rand(n, generator=generator) < 5e-4"),
    ("case-quantization.md", "分位数阈值不超过 min-max 的阈值", "notebooks/algorithm/quantization-basics.ipynb",
     'assert c["p99.9"]["alpha"] <= c["p99.99"]["alpha"] <= c["min-max"]["alpha"]'),
    ("case-quantization.md", "MSE 搜索在校准集上的 MSE 不大于 min-max 的", "notebooks/algorithm/quantization-basics.ipynb",
     'assert c["MSE"]["calib_mse"] <= c["min-max"]["calib_mse"]'),
    ("case-quantization.md", "逐组 < 逐通道 < 逐张量的一半", "notebooks/algorithm/quantization-basics.ipynb",
     "assert m_g < m_c < m_t / 2"),
    ("case-quantization.md", "3 个幅度 30 倍的离群 token", "notebooks/algorithm/quantization-basics.ipynb",
     "outlier_tokens = torch.randperm(TOKENS, generator=gen)[:3]\nX[outlier_tokens] *= 30"),
    ("case-quantization.md", "比逐张量高 20 dB 以上", "notebooks/algorithm/quantization-basics.ipynb",
     'assert act["per-token"][1] > act["per-tensor"][1] + 20'),
    ("case-quantization.md", "5 万个样本校准、另 20 万个评估", "notebooks/algorithm/quantization-basics.ipynb",
     "calib = make_activations(50_000, gen)\nheld_out = make_activations(200_000, gen)"),
    ("case-quantization.md", "没有离群值时逐张量 W8A8 的困惑度上升不到 1%", "notebooks/algorithm/llm-weight-quantization.ipynb",
     'assert w8a8["原模型", "W8A8 逐张量"] < 1.01 * ppl_fp32'),
    ("case-quantization.md", "困惑度上升超过 10%", "notebooks/algorithm/llm-weight-quantization.ipynb",
     'assert w8a8["注入离群通道", "W8A8 逐张量"] > 1.1 * ppl_fp32'),
    ("case-quantization.md", "都把它拉回 1% 以内", "notebooks/algorithm/llm-weight-quantization.ipynb",
     'assert w8a8["注入离群通道", "SmoothQuant α=0.5"] < 1.01 * ppl_fp32'),
    ("case-quantization.md", "都把它拉回 1% 以内", "notebooks/algorithm/llm-weight-quantization.ipynb",
     'assert w8a8["注入离群通道", "LLM.int8()"] < 1.01 * ppl_fp32'),
    ("case-quantization.md", "3 位 GPTQ 不差于 RTN", "notebooks/algorithm/llm-weight-quantization.ipynb",
     'assert results[label, 3, "GPTQ"] <= results[label, 3, "RTN"]'),
    ("case-quantization.md", "有显著通道时 3 位 AWQ 不差于 RTN", "notebooks/algorithm/llm-weight-quantization.ipynb",
     'assert results["注入离群通道", 3, "AWQ"] <= results["注入离群通道", 3, "RTN"]'),
    ("case-tuning.md", "困惑度不变（断言相对差小于 $10^{-4}$）", "notebooks/algorithm/llm-weight-quantization.ipynb",
     "assert abs(ppl_outlier / ppl_fp32 - 1) < 1e-4"),
    # tuning: the data and the tolerance of code/stack/tuning.py
    ("case-tuning.md", "把 1024 个词元排成一个置换", "code/stack/tuning.py", "noise: float = 0.1,\n                   used: int = 1024)"),
    ("case-tuning.md", "以 10% 的概率换成均匀随机的词元", "code/stack/tuning.py", "noise: float = 0.1,"),
    ("case-tuning.md", "输入与目标错开一位（`ids[:, :-1]` 与 `ids[:, 1:]`）", "code/stack/tuning.py",
     "return [(b[:, :-1].contiguous(), b[:, 1:].contiguous()) for b in ids]"),
    ("case-tuning.md", "随机误差典型值放大 4 倍的估计", "code/stack/tuning.py", "return 4 * math.sqrt(n) * per_matmul"),
]


@pytest.mark.parametrize("page,words,source,text", CLAIMS, ids=[f"{c[0]}:{c[1][:24]}" for c in CLAIMS])
def test_claim_is_on_the_page_and_in_its_source(page, words, source, text):
    assert words in _page(page), f"docs/interview/{page} no longer says {words!r}: update CLAIMS with the page"
    assert text in _source(source), f"{source} no longer has {text!r}: the page quotes a lab or code that changed"


def test_the_loss_spike_the_tuning_case_describes():
    """Both curves jump at the 7th of 50 steps (index 6), by the same amount, and fall back the next step."""
    training = TUNING["results"]["training"]
    assert training["steps"] == 50 and training["tail_steps"] == 10 and training["lr"] == 6e-4
    curves = training["curves"]
    for name in ("R0", "R5"):
        c = curves[name]
        assert len(c) == 50 and max(range(50), key=c.__getitem__) == 6
        assert c[6] > c[0] and c[7] < c[5]  # above the first-step loss, then back below the step before it
    assert abs(curves["R0"][6] / curves["R5"][6] - 1) < 0.01
    text = _page("case-tuning.md")
    assert "50 步训练里两条曲线都在第 7 步突然跳高" in text and "恒定学习率 6e-4" in text
    assert "同权重、同数据训练 50 步，基线与最后一级最后 10 步" in text


def test_score_matrix_bytes_quoted_in_the_tuning_case():
    s = TUNING["results"]["shape"]
    assert s["batch"] * s["heads"] * s["seq"] ** 2 * 2 == 256 * 2**20  # bf16, per layer
    assert "$b \\cdot h \\cdot s^2 = 8 \\times 16 \\times 1024^2$ 个元素，bf16 时每层 256 MiB" in _page("case-tuning.md")


def test_share_of_input_the_benchmark_grid_never_reads():
    """case-grid-sample.md: with the lab's grid (rotation 15 deg, scale 0.9, shift (0.05, -0.03),
    align_corners=False) about a fifth of the input is never a bilinear corner, so the minimal byte count
    (one full read of the input) overstates the bytes really needed by about a tenth."""
    import math

    import torch
    import torch.nn.functional as F

    n, C = 512, 64
    a = math.radians(15.0)
    theta = torch.tensor([[[0.9 * math.cos(a), -0.9 * math.sin(a), 0.05],
                           [0.9 * math.sin(a), 0.9 * math.cos(a), -0.03]]], dtype=torch.float64)
    g = F.affine_grid(theta, [1, 1, n, n], align_corners=False)
    ix, iy = ((g[..., 0] + 1) * n - 1) / 2, ((g[..., 1] + 1) * n - 1) / 2
    x0, y0 = ix.floor().long(), iy.floor().long()
    touched = torch.zeros(n, n, dtype=torch.bool)
    for dx in (0, 1):
        for dy in (0, 1):
            xx, yy = x0 + dx, y0 + dy
            ok = (xx >= 0) & (xx < n) & (yy >= 0) & (yy < n)
            touched[yy[ok], xx[ok]] = True
    unread = 1 - touched.double().mean().item()
    assert 0.15 < unread < 0.25                                    # "约两成"
    q_min = 2 * C + 2                                               # per pixel and image, in 4-byte words
    over = q_min / (C * (1 - unread) + C + 2) - 1
    assert 0.07 < over < 0.15                                       # "约一成"
    text = _page("case-grid-sample.md")
    assert "约两成输入根本不会被读到，最少字节数因此多算了约一成" in text


def test_pages_quote_measurements_only_through_tokens():
    """No hand-typed time, rate, percentage or ratio on the case pages: those left in prose are lab
    thresholds and percentiles named in CLAIMS (99.9%, 99.99%, 0.05%, 1%, 10%), the 2x peak ratio the
    datasheet gives (quoted as a token where it is read against a measurement) and a hypothetical 20%."""
    allowed = {"99.9%", "99.99%", "0.05%", "1%", "10%", "2倍", "20%"}
    pattern = re.compile(r"(?<![\w.$^{])\d+(?:\.\d+)?\s*(?:%|倍|µs|ms|TFLOP/s|GB/s)(?![\w}])")
    for name in ("project-deep-dive.md", "case-grid-sample.md", "case-quantization.md", "case-tuning.md"):
        text = re.sub(r"\{\{(?:bench|record)[^}]*\}\}", "‹token›", _page(name))
        text = re.sub(r"`[^`]*`", "‹code›", text)
        found = {m.group(0).replace(" ", "") for m in pattern.finditer(text)} - allowed
        assert not found, f"docs/interview/{name}: hand-typed measured-looking figures {sorted(found)}"
