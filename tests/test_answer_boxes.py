"""The "一句话答案" box holds one or two sentences of at most about 120 characters (CONTRIBUTING.md 规范 8)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import answer_boxes, checks

ROOT = Path(__file__).resolve().parents[1]

PAGE = """---
title: 示例页面
description: 一个用来检验答案框长度的示例页面。
tags:
  - 算子层
---

# 示例页面

!!! abstract "一句话答案"
    {box}

## 机制

正文。
"""

GOOD = ("FlashAttention 把 $Q$、$K$、$V$ 分块放进 SRAM，用在线 softmax 逐块累加，$N \\times N$ 的得分矩阵从不写回 HBM；"
        "运算量不变，HBM 访问从 $\\Theta(Nd + N^2)$ 降到 $\\Theta(N^2 d^2 / M)$。")
LONG = GOOD + "反向传播不保存 $P$，只保存输出和每行的 logsumexp，按块重算；" * 3


def write(tmp_path: Path, box: str) -> Path:
    page = tmp_path / "docs" / "a.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(PAGE.format(box=box), encoding="utf-8")
    return page


@pytest.mark.parametrize("markdown, expected", [
    ("MLIR 是造编译器的框架。", 12),                       # CJK and Latin letters count, spaces and 。 do not
    ("`cudaMalloc` 要 30 µs", 15),                        # inline code counts its letters; µ is a letter
    ("**粗体**与[链接](https://example.org/a-long-address)", 5),  # markup counts what it renders
    ("$\\Theta(N^2 d^2 / M)$", 6),                        # math: symbols 1, operators and layout 0
    ("$\\log_2 n$、$\\frac{a}{b}$", 7),                   # \log is its letters, \frac draws nothing
    ("约 {{record records/x/y a.b fmt=.1f}} 倍", 5),      # a build-time figure counts like a number
    ("<span>注</span><!-- 不显示 -->", 1),
])
def test_counting(markdown, expected):
    assert answer_boxes.measure(markdown)[0] == expected


def test_sentences():
    assert answer_boxes.measure("一句。两句！")[1] == 2
    assert answer_boxes.measure("一句。两句？三句")[1] == 3
    assert answer_boxes.measure("“引用。”")[1] == 1
    assert answer_boxes.measure("`a。b` 不是句子")[1] == 1        # 。 inside code ends nothing


def test_a_good_box_passes(tmp_path):
    page = write(tmp_path, GOOD)
    [box] = answer_boxes.boxes(page)
    assert box.line == 10 and box.has_math and box.chars <= answer_boxes.LIMIT_MATH
    assert answer_boxes.check(page) == []
    assert not [p for p in checks.check_markdown(page) if "answer box" in p.message]


def test_an_overlong_box_fails_with_file_and_line(tmp_path):
    page = write(tmp_path, LONG)
    [problem] = answer_boxes.check(page)
    n = answer_boxes.boxes(page)[0].chars
    assert problem.path.endswith("docs/a.md") and problem.line == 10
    assert str(problem).startswith(
        f"{problem.path}:10: the answer box has {n} characters (limit 140): keep the one- or two-sentence answer "
        "in the box and move the rest into the page")
    # the same problem comes out of the source checks that `make check` runs
    assert [p for p in checks.check_markdown(page) if "answer box" in p.message] == [problem]


def test_without_math_the_limit_is_120(tmp_path):
    page = write(tmp_path, "缓存分配器按块复用显存，" * 11 + "不再调用 cudaMalloc。")
    [problem] = answer_boxes.check(page)
    assert "(limit 120)" in problem.message


def test_three_sentences_fail(tmp_path):
    page = write(tmp_path, "第一句。第二句。第三句。")
    [problem] = answer_boxes.check(page)
    assert problem.line == 10 and "3 sentences (limit 2)" in problem.message


def test_a_box_spanning_lines_ends_at_the_next_block(tmp_path):
    page = write(tmp_path, "第一行，\n    第二行。\n\n    同一个框里的第二段。")
    [box] = answer_boxes.boxes(page)
    assert box.source.endswith("同一个框里的第二段。") and "机制" not in box.source and box.sentences == 2


def test_every_page_passes():
    problems = [str(p) for path in sorted((ROOT / "docs").rglob("*.md")) for p in answer_boxes.check(path)]
    assert not problems, "\n".join(problems)


def test_command_line():
    out = subprocess.run([sys.executable, "-m", "tools.answer_boxes", "docs/compiler"], cwd=ROOT,
                         capture_output=True, text=True)
    assert "box(es): median" in out.stdout


# ---------------------------------------------------------------- in the browser: body-size type, short text

BOX_PAGES = ["operator/flash-attention/", "framework/zero-fsdp/", "algorithm/transformer/", "compiler/torch-compile/"]


def box_metrics(page) -> dict:
    """Font size of the answer box's text and of the page's body paragraphs, and the box's visible text length."""
    return page.evaluate("""() => {
        const box = [...document.querySelectorAll('.md-typeset .admonition.abstract')]
            .find(el => el.querySelector('.admonition-title').textContent.trim() === '一句话答案');
        const text = box.querySelector(':scope > p:not(.admonition-title)');
        const body = document.querySelector('.md-content article > p');
        return {box: parseFloat(getComputedStyle(text).fontSize), body: parseFloat(getComputedStyle(body).fontSize),
                chars: (() => {  // the formulas once (KaTeX also keeps a MathML copy for screen readers)
                    const clone = text.cloneNode(true);
                    clone.querySelectorAll('.katex-mathml').forEach(el => el.remove());
                    return clone.textContent.replace(/\\s+/g, '').length;
                })()};
    }""")


CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (see tests/test_browser.py)")
@pytest.mark.parametrize("width", [390, 1440])
def test_answer_box_reads_at_body_size(server, width):
    """Uses the session's full site build (the `server` fixture); `-k 'not body_size'` runs only the checks."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                                   "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            for path in BOX_PAGES:
                page.goto(server + path)
                m = box_metrics(page)
                assert m["box"] == m["body"], f"{path} at {width}px: box text {m['box']}px, body text {m['body']}px"
                # rendered text, punctuation and formula markup included: well under the old ~390-character median
                assert m["chars"] <= 160, f"{path}: the answer box renders {m['chars']} characters"
        finally:
            browser.close()
