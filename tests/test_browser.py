"""The built site in a real browser (Debian's chromium, driven by Playwright), served on localhost."""
from __future__ import annotations

import json
import os
import shutil
import urllib.request
from urllib.parse import urlparse

import pytest

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium: install Debian's chromium (`apt-get install chromium`; .ci/run does it) or set CHROMIUM=/path/to/chrome")

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Visit:
    """A page plus everything it requested and every console error it logged."""

    def __init__(self, browser, base, path, **context):
        self.context = browser.new_context(**context)
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.base = base
        self.page.goto(base + path)
        self.page.wait_for_load_state("networkidle")

    def foreign(self) -> list[str]:
        host = urlparse(self.base).netloc
        return [u for u in self.requests if urlparse(u).scheme in ("http", "https", "ws", "wss") and urlparse(u).netloc != host]

    def close(self):
        self.context.close()


@pytest.fixture()
def visit(browser, server):
    opened = []

    def _visit(path="", **context):
        v = Visit(browser, server, path, **context)
        opened.append(v)
        return v

    yield _visit
    for v in opened:
        v.close()


def search(v: Visit, query: str) -> list[str]:
    """Type the query as a person does, then read the result links in order."""
    box = v.page.locator(".md-search__input")
    box.click()
    box.press_sequentially(query, delay=20)
    v.page.keyboard.press("End")  # a real key-up: CJK text typed by Playwright fires none
    v.page.wait_for_selector(".md-search-result__item", timeout=10_000)
    hrefs = v.page.locator(".md-search-result__item > .md-search-result__link").evaluate_all(
        "els => els.map(e => e.getAttribute('href'))")
    return [urlparse(h).path.removeprefix(urlparse(v.base).path) for h in hrefs]


SEARCHES = [  # (query, the page that must come first)
    ("量化", "algorithm/"),
    ("共享内存", "operator/"),
    ("FlashAttention", "operator/"),
    ("ZeRO", "framework/"),
    ("__syncthreads", "operator/"),
    ("访存密集型", "operator/"),
    ("张量并行", "framework/"),
    ("红黑树", "foundations/algorithms/"),
    ("PagedAttention", "framework/"),
    ("向量加法", "operator/vector-add/"),
]


@pytest.mark.parametrize("query,expected", SEARCHES, ids=[q for q, _ in SEARCHES])
def test_search_lists_the_right_page_first(visit, query, expected):
    v = visit()
    results = search(v, query)
    assert results and results[0] == expected, f"searching {query!r}: expected {expected} first, got {results[:5]}"
    assert not v.foreign() and not v.errors


@pytest.mark.parametrize("path", ["", "stack/", "hardware/", "operator/", "operator/vector-add/", "resources/tags/"])
def test_page_loads_nothing_from_other_hosts_and_logs_no_errors(visit, path):
    v = visit(path)
    assert not v.foreign(), f"/{path} requested other hosts: {v.foreign()}"
    assert not v.errors, f"/{path} logged console errors: {v.errors}"


def test_math_renders_with_the_self_hosted_mathjax(visit):
    v = visit("hardware/")
    v.page.wait_for_function("document.querySelectorAll('.arithmatex').length > 0 && "
                             "[...document.querySelectorAll('.arithmatex')].every(e => e.querySelector('mjx-container'))",
                             timeout=20_000)
    raw = v.page.evaluate("[...document.querySelectorAll('.arithmatex')].filter(e => /\\\\\\(|\\\\\\[/.test(e.innerText)).length")
    assert raw == 0, "raw TeX is visible"
    assert any("/assets/vendor/mathjax/tex-chtml.js" in u for u in v.requests)


def test_mermaid_diagrams_render_with_the_self_hosted_mermaid(visit):
    v = visit("stack/")
    # Material renders each diagram into a closed shadow root on a div.mermaid; an empty or
    # failed diagram has no height.
    v.page.wait_for_function("document.querySelectorAll('div.mermaid').length > 0", timeout=20_000)
    heights = v.page.evaluate("[...document.querySelectorAll('div.mermaid')].map(e => e.getBoundingClientRect().height)")
    assert heights and all(h > 50 for h in heights), heights
    assert v.page.locator("pre.mermaid").count() == 0, "a diagram was left unrendered"
    assert any("/assets/vendor/mermaid/mermaid.min.js" in u for u in v.requests)


def test_lab_page_shows_executed_outputs_and_working_buttons(visit, server):
    v = visit("operator/vector-add/")
    outputs = v.page.locator(".jupyter-wrapper .jp-OutputArea-output").all_inner_texts()
    joined = "\n".join(outputs)
    assert "运行模式：CPU 解释器" in joined and "逐位相等" in joined
    assert v.page.locator(".jupyter-wrapper img").count() >= 1, "the roofline figure is missing"
    assert v.page.locator(".jupyter-wrapper mjx-container").count() > 0, "lab math did not render"
    colab = v.page.locator("[data-lab-button=colab]").get_attribute("href")
    github = v.page.locator("[data-lab-button=github]").get_attribute("href")
    download = v.page.locator("[data-lab-button=download]").get_attribute("href")
    assert colab == "https://colab.research.google.com/github/aisys-handbook/handbook/blob/main/notebooks/operator/vector-add.ipynb"
    assert github == "https://github.com/aisys-handbook/handbook/blob/main/notebooks/operator/vector-add.ipynb"
    with urllib.request.urlopen(server + "operator/vector-add/" + download) as r:
        nb = json.loads(r.read().decode("utf-8"))
    assert not any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), "download must be the clean source"
    edit = v.page.locator("a[rel=edit]").get_attribute("href")
    assert edit.endswith("/edit/main/notebooks/operator/vector-add.ipynb")


def test_content_tabs_switch(visit):
    v = visit("")
    labels = v.page.locator(".tabbed-labels > label")
    assert labels.count() >= 3
    labels.nth(1).click()
    assert v.page.locator(".tabbed-block").nth(1).is_visible()
    assert not v.page.locator(".tabbed-block").nth(0).is_visible()


def test_code_copy_button_copies_the_code(visit):
    v = visit("operator/")
    v.context.grant_permissions(["clipboard-read", "clipboard-write"])
    button = v.page.locator(".highlight button[data-md-type=copy]").first
    button.scroll_into_view_if_needed()
    button.click()
    dialog = v.page.locator(".md-dialog__inner")
    dialog.wait_for(state="visible", timeout=5_000)
    assert "复制" in dialog.inner_text()
    copied = v.page.evaluate("navigator.clipboard.readText()")
    assert "__global__ void vector_add" in copied


def test_colour_scheme_toggle_persists(visit):
    v = visit("", color_scheme="light")

    def scheme():
        return v.page.evaluate("document.body.getAttribute('data-md-color-scheme')")

    assert scheme() == "default"
    for _ in range(3):  # auto → light → dark
        if scheme() == "slate":
            break
        v.page.locator("form[data-md-component=palette] label:visible").first.click()
    assert scheme() == "slate", "the toggle never reached the dark scheme"
    v.page.reload()
    v.page.wait_for_load_state("networkidle")
    assert scheme() == "slate", "the dark scheme did not persist across a reload"
    v.page.goto(v.base + "operator/")
    assert scheme() == "slate", "the dark scheme did not persist to another page"


@pytest.mark.parametrize("path", ["", "stack/", "hardware/", "operator/", "operator/vector-add/"])
def test_phone_width_has_no_horizontal_overflow(visit, path):
    v = visit(path, viewport={"width": 375, "height": 740}, device_scale_factor=2, is_mobile=True, has_touch=True)
    width = v.page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, f"/{path} is {width}px wide on a 375px screen"
