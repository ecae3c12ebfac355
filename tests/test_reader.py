"""The build-time reading fixes of issue 30 (tools/reader.py, tools/diagrams.py), without a browser or a build.
tests/test_reader_layout.py checks the same things on the built site in Chromium."""
from __future__ import annotations

import pytest

from tools import diagrams, reader


def test_glossary_tooltip_only_at_the_first_occurrence_and_never_in_headings():
    page = ('<h2 id="x">用 <abbr title="流式多处理器">SM</abbr> 调度</h2><p><abbr title="流式多处理器">SM</abbr> 与 '
            '<abbr title="高带宽内存">HBM</abbr>；又一个 <abbr title="流式多处理器">SM</abbr>。</p>')
    out = reader.glossary_once(page)
    assert out.startswith('<h2 id="x">用 SM 调度</h2>')
    assert out.count('<abbr title="流式多处理器">SM</abbr>') == 1 and out.count("<abbr") == 2
    assert out.endswith("又一个 SM。</p>")


def test_a_row_of_formulas_is_split_at_top_level_qquad_only():
    layernorm = (r"\mu = \frac{1}{N}\sum_{i} x_i, \qquad \sigma^2 = \frac{1}{N}\sum_i (x_i - \mu)^2, \qquad "
                 r"r = \frac{1}{\sqrt{\sigma^2 + \epsilon}}, \qquad y_i = \gamma_i\,(x_i - \mu)\,r + \beta_i .")
    parts = reader._split_qquad(layernorm)
    assert len(parts) == 4 and parts[0].endswith("x_i,") and parts[3].startswith("y_i")
    for whole in (r"\begin{aligned} a &= 1 \qquad b = 2 \end{aligned}", r"\text{a \qquad b} = 1",
                  r"\left( a \qquad b \right)", r"a = b"):
        assert reader._split_qquad(whole) == [whole]
    html = '<p>x</p><div class="arithmatex">\\[a = 1, \\qquad b = 2\\]</div>'
    assert reader.math_rows(html) == ('<p>x</p><div class="math-row"><div class="arithmatex">\\[a = 1,\\]</div>'
                                      '<div class="arithmatex">\\[b = 2\\]</div></div>')


@pytest.mark.parametrize("heading,text", [
    ("2. 反向传播：由 logsumexp 重算 $P$", "2. 反向传播：由 logsumexp 重算 P"),
    ("3c. 先乘后缩放的 $QK^\\top$（fp16）", "3c. 先乘后缩放的 QKᵀ（fp16）"),
    ("1. $\\mathrm{E}[x^2] - \\mathrm{E}[x]^2$ 的灾难性抵消", "1. E[x²] − E[x]² 的灾难性抵消"),
    ("任意长度：补 $+\\infty$", "任意长度：补 +∞"),
    ("怎样取 $m$ 与 $p$", "怎样取 m 与 p"),
])
def test_lab_headings_show_their_math_as_text(heading, text):
    assert reader.lab_heading(heading) == text


def test_plot_alt_text_comes_from_the_cell_that_drew_it():
    code = ('fig, ax = plt.subplots()\nax.set_title(f"attention {name}, N = {n}")\n'
            'ax.set_xlabel("sequence length")\nax.set_ylabel("TFLOP/s")\n')
    alt = reader.plot_alt(code, "2. 反向传播")
    assert alt == "“2. 反向传播”一节的图：attention …, N = …（横轴 sequence length；纵轴 TFLOP/s）"
    assert reader.plot_alt("# 图注：两种分配器的碎片率随时间的变化\nplt.plot(x)", "x") == "两种分配器的碎片率随时间的变化"
    assert reader.plot_alt("plt.plot(x)", None) == "本实验的输出图"


def test_a_flowchart_is_flipped_and_others_are_not():
    assert diagrams._flipped("flowchart LR\n  A --> B") == "flowchart TB\n  A --> B"
    assert diagrams._flipped("%% note\ngraph TD;\n  A --> B") == "%% note\ngraph LR;\n  A --> B"
    assert diagrams._flipped("sequenceDiagram\n  A->>B: x") is None


def test_a_wide_diagram_keeps_its_labels_legible_and_phones_get_the_narrower_variant():
    wide = {"width": 2400.0, "height": 200.0, "label": 16.0}
    tall = {"width": 350.0, "height": 1200.0, "label": 16.0}
    fit = diagrams._fit(wide, diagrams.PHONE_COLUMN)
    assert fit["label"] == pytest.approx(diagrams.LABEL_MIN_PX) and fit["overflow"] > 0  # scrolls, never shrinks further
    assert diagrams._fit({"width": 300.0, "height": 100.0, "label": 16.0}, 688)["label"] == 16.0  # never enlarged
    assert diagrams._pick([wide, tall], diagrams.PHONE_COLUMN, diagrams.PHONE_MAX_HEIGHT) == 1
    assert diagrams._pick([wide, {**tall, "height": 5000.0}], diagrams.DESKTOP_COLUMN, diagrams.DESKTOP_MAX_HEIGHT) == 0
    svg = '<svg data-label-px="16" id="m" width="100%" style="max-width: 2400px;" viewBox="0 0 2400 200"><g/></svg>'
    sized = diagrams._sized(svg)
    assert 'style="max-width: 2400.0px; min-width: 1650.0px;"' in sized and sized.endswith("<g/></svg>")
