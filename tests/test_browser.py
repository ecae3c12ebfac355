"""The built site in a real browser (Debian's chromium, driven by Playwright), served on localhost."""
from __future__ import annotations

import json
import urllib.request
from urllib.parse import urljoin, urlparse

import pytest

from conftest import CHROMIUM, NO_CHROMIUM, Visit  # noqa: E402  (browser and visit are conftest fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)


def search(v: Visit, query: str, allow_none: bool = False) -> list[str]:
    """Type the query as a person does, then read the result links in order."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = v.page.locator(".md-search__input")
    box.click()
    box.press_sequentially(query, delay=20)
    v.page.keyboard.press("End")  # a real key-up: CJK text typed by Playwright fires none
    try:
        v.page.wait_for_selector(".md-search-result__item", timeout=10_000)
    except PlaywrightTimeout:
        if allow_none:
            return []
        raise AssertionError(f"searching {query!r} listed no result") from None
    hrefs = v.page.locator(".md-search-result__item > .md-search-result__link").evaluate_all(
        "els => els.map(e => e.getAttribute('href'))")
    return [urlparse(h).path.removeprefix(urlparse(v.base).path) for h in hrefs]


# (query, the page expected, how high it must rank): the three queries and the
# identifiers must come first; the rest within the top 3 results.
SEARCHES = [
    ("量化", "algorithm/quantization/", 3),
    # shared memory is taught where it is used (the transpose and GEMM tilings, bank conflicts) and where the
    # hierarchy is laid out; any of them is a right first answer
    ("共享内存", ("operator/memory-hierarchy/", "operator/transpose/", "operator/gemm/"), 3),
    ("FlashAttention", "operator/flash-attention/", 3),
    ("ZeRO", "framework/zero-fsdp/", 1),
    ("__syncthreads", "operator/sort/", 3),
    ("访存密集型", "operator/roofline/", 3),
    ("张量并行", "framework/tensor-parallel/", 1),
    ("红黑树", "foundations/algorithms/", 1),
    ("PagedAttention", "framework/paged-attention/", 1),
    ("向量加法", "operator/vector-add/", 1),
    ("算子融合", "operator/", 3),
    ("集合通信", "runtime/collectives/", 3),
    ("智能指针", "foundations/cpp/smart-pointers/", 1),
    ("虚拟内存", "foundations/os/virtual-memory/", 3),
    ("协程", "foundations/os/processes-threads/", 3),
    ("引用计数", "foundations/python/", 3),
    ("装饰器", "foundations/python/", 3),
    ("流水线并行", "framework/pipeline-parallel/", 1),
    ("缓存分配器", "runtime/memory-management/", 3),
    ("统一内存", "driver/host-device-memory/", 3),
    ("动态链接", "foundations/cpp/linking/", 1),
    ("条件变量", "foundations/os/synchronization/", 3),
    ("哈希表", "foundations/algorithms/", 3),
    ("NCCL", "runtime/collectives/", 3),
    ("RDMA", "foundations/networking/", 3),
    ("TCP", "foundations/networking/", 3),
    ("GIL", "foundations/python/", 3),
    ("MIG", "driver/virtualization/", 1),
    ("LoRA", ("algorithm/training-stages/", "algorithm/hands-on-finetuning/"), 3),  # the idea, or doing it
    ("MLIR", "compiler/", 3),
    ("TVM", "compiler/tvm/", 1),
    ("wgmma", "operator/gemm/", 5),
    ("shared_ptr", "foundations/cpp/smart-pointers/", 1),
    ("im2col", "operator/convolution/", 3),
    ("GPTQ", "algorithm/llm-quantization/", 3),
    ("双调排序", "operator/sort/", 3),
    ("E4M3", "hardware/numeric-formats/", 3),
    ("Welford", "operator/layernorm/", 3),
    ("PCIe", "hardware/interconnect/", 3),
    ("Amdahl", "hardware/", 3),
    ("torch.compile", ("compiler/", "compiler/torch-compile/"), 3),  # the chapter, or its torch.compile page
    ("Megatron", "framework/tensor-parallel/", 3),
    ("反向传播", "algorithm/backprop/", 3),
    ("RoPE", ("algorithm/positional-encoding/", "operator/llm-kernels/"), 3),  # the idea, or its kernel
    ("投机解码", "framework/speculative-decoding/", 3),
    ("多面体模型", "compiler/polyhedral/", 3),
    ("伪共享", "hardware/branch-false-sharing/", 3),
    ("SMO", "algorithm/classic-ml/", 3),
    ("非极大值抑制", "algorithm/detection/", 3),
    ("流水线空泡", "framework/pipeline-parallel/", 3),
    ("GDDR", "hardware/memory/", 3),
]


@pytest.mark.parametrize("query,expected,rank", SEARCHES, ids=[q for q, _, _ in SEARCHES])
def test_search_finds_the_right_page(visit, query, expected, rank):
    v = visit()
    results = search(v, query)
    wanted = expected if isinstance(expected, tuple) else (expected,)
    assert set(wanted) & set(results[:rank]), f"searching {query!r}: expected {expected} in the top {rank}, got {results[:5]}"
    assert not v.foreign() and not v.errors


@pytest.mark.parametrize("how", ["click", "shortcut"])
def test_search_index_is_fetched_only_when_search_is_used(visit, how):
    """No page load requests the index (tools/hooks.py _patch_lazy_search); using search does."""
    v = visit("operator/")
    v.page.wait_for_timeout(500)
    assert not [u for u in v.requests if "search_index" in u], "the page fetched the search index before search was used"
    if how == "click":
        v.page.locator(".md-search__input").click()
    else:
        v.page.locator("body").press("/")  # Material's search shortcut
    v.page.wait_for_function("document.activeElement && document.activeElement.matches('.md-search__input')")
    v.page.wait_for_timeout(100)
    assert len([u for u in v.requests if u.endswith("search/search_index.json")]) == 1
    v.page.keyboard.type("NCCL", delay=20)
    v.page.wait_for_selector(".md-search-result__item", timeout=10_000)
    assert not v.foreign() and not v.errors


def test_search_deep_link_loads_the_index_at_once(visit):
    v = visit("?q=FlashAttention")
    v.page.wait_for_selector(".md-search-result__item", timeout=10_000)
    assert any(u.endswith("search/search_index.json") for u in v.requests)


@pytest.mark.parametrize("path", ["", "stack/", "hardware/", "operator/", "operator/vector-add/", "resources/tags/"])
def test_page_loads_nothing_from_other_hosts_and_logs_no_errors(visit, path):
    v = visit(path)
    assert not v.foreign(), f"/{path} requested other hosts: {v.foreign()}"
    assert not v.errors, f"/{path} logged console errors: {v.errors}"


def test_math_is_typeset_at_build_time_and_needs_no_script(visit):
    v = visit("hardware/")
    count = v.page.evaluate("document.querySelectorAll('.math-static').length")
    typeset = v.page.evaluate("[...document.querySelectorAll('.math-static')].filter(e => e.querySelector('.katex')).length")
    assert count > 0 and typeset == count, f"{typeset} of {count} formulas typeset"
    assert v.page.evaluate("document.querySelectorAll('.arithmatex').length") == 0, "a formula was left for the browser"
    raw = v.page.evaluate(r"[...document.querySelectorAll('.math-static')].filter(e => /\\\(|\\\[/.test(e.innerText)).length")
    assert raw == 0, "raw TeX is visible"
    assert not any("katex.min.js" in u for u in v.requests), "a page whose math is typeset loaded KaTeX's script"
    assert any("/assets/vendor/katex/katex.min.css" in u for u in v.requests)
    assert any(u.endswith(".woff2") and "/assets/vendor/katex/fonts/" in u for u in v.requests)
    # the glyphs are drawn in KaTeX's font, not a fallback
    family = v.page.evaluate("getComputedStyle(document.querySelector('.math-static .katex')).fontFamily")
    assert "KaTeX" in family


def _label_colour(v):
    return v.page.evaluate("""() => {
        const label = document.querySelector('.mermaid-static svg .nodeLabel, .mermaid-static svg text');
        return getComputedStyle(label).color + '|' + getComputedStyle(label).fill;
    }""")


def test_mermaid_diagrams_are_inline_svg_legible_in_both_schemes(visit):
    v = visit("stack/", color_scheme="light")
    heights = v.page.evaluate("[...document.querySelectorAll('.mermaid-static svg')].map(e => e.getBoundingClientRect().height)")
    assert heights and all(h > 50 for h in heights), heights
    assert v.page.locator("pre.mermaid").count() == 0, "a diagram was left unrendered"
    assert not any("mermaid" in u for u in v.requests), "a page with pre-rendered diagrams loaded Mermaid"
    assert v.page.evaluate("document.querySelectorAll('.mermaid-static svg .nodeLabel, .mermaid-static svg text').length") > 3
    light = _label_colour(v)
    dark_visit = visit("stack/", color_scheme="dark")
    dark_visit.page.evaluate("document.body.setAttribute('data-md-color-scheme', 'slate')")
    dark = _label_colour(dark_visit)
    assert light != dark, "diagram labels keep one colour in both schemes, so one of them is unreadable"


def test_lab_page_shows_executed_outputs_and_working_buttons(visit, server):
    v = visit("operator/vector-add/")
    outputs = v.page.locator(".jupyter-wrapper .jp-OutputArea-output").all_inner_texts()
    joined = "\n".join(outputs)
    assert "运行模式：CPU 解释器" in joined and "逐位相等" in joined
    assert v.page.locator(".jupyter-wrapper img").count() >= 1, "the roofline figure is missing"
    assert v.page.locator(".jupyter-wrapper .katex").count() > 0, "lab math did not render"
    colab = v.page.locator("[data-lab-button=colab]").get_attribute("href")
    github = v.page.locator("[data-lab-button=github]").get_attribute("href")
    download = v.page.locator("[data-lab-button=download]").get_attribute("href")
    assert colab == "https://colab.research.google.com/github/aisys-handbook/handbook/blob/main/notebooks/operator/vector-add.ipynb"
    assert github == "https://github.com/aisys-handbook/handbook/blob/main/notebooks/operator/vector-add.ipynb"
    # instant navigation (mkdocs.yml) makes link hrefs absolute in the page: resolve either form
    with urllib.request.urlopen(urljoin(server + "operator/vector-add/", download)) as r:
        nb = json.loads(r.read().decode("utf-8"))
    assert not any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), "download must be the clean source"
    edit = v.page.locator("a[rel=edit]").get_attribute("href")
    # GitHub's rendered notebook, not its edit page (raw JSON): issue 30, tests/test_reader_layout.py
    assert edit == github


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


A11Y_PAGES = ["", "operator/", "operator/vector-add/", "interview/"]


@pytest.mark.parametrize("path", A11Y_PAGES, ids=[p or "home" for p in A11Y_PAGES])
def test_no_serious_or_critical_accessibility_violations(visit, path):
    """axe-core, pinned in package.json and injected from node_modules (no download)."""
    from conftest import ROOT

    v = visit(path)
    v.page.add_script_tag(path=str(ROOT / "node_modules" / "axe-core" / "axe.min.js"))
    violations = v.page.evaluate("""async () => {
        const r = await axe.run(document, {resultTypes: ['violations']});
        return r.violations.map(x => ({id: x.id, impact: x.impact, help: x.help,
                                       nodes: x.nodes.slice(0, 3).map(n => n.target.join(" ") + " :: " + (n.failureSummary || "").slice(0, 200))}));
    }""")
    bad = [x for x in violations if x["impact"] in ("serious", "critical")]
    assert not bad, f"/{path}: " + json.dumps(bad, ensure_ascii=False, indent=1)


SHOTS = {"home": "", "layer": "operator/", "lab": "operator/vector-add/", "interview": "interview/"}


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("device", ["desktop", "mobile"])
def test_screenshots_for_review(visit, scheme, device):
    """Saved under test-results/screenshots/ (CI keeps them as an artifact) for a person to look at."""
    from conftest import ROOT

    out = ROOT / "test-results" / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    size = {"desktop": {"width": 1280, "height": 800}, "mobile": {"width": 375, "height": 740}}[device]
    for name, path in SHOTS.items():
        v = visit(path, viewport=size, color_scheme=scheme, is_mobile=device == "mobile")
        expected = "slate" if scheme == "dark" else "default"
        assert v.page.evaluate("document.body.getAttribute('data-md-color-scheme')") == expected
        file = out / f"{name}-{scheme}-{device}.png"
        v.page.screenshot(path=str(file), full_page=False)
        assert file.stat().st_size > 10_000, f"{file.name} looks blank"


# ------------------------------------------------------------------ the assertions catch broken builds

def _serve(site):
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_port}/"


def _break(project, how):
    if how == "cdn-script":
        cfg = project / "mkdocs.yml"
        cfg.write_text(cfg.read_text(encoding="utf-8").replace(
            "extra_javascript:\n", "extra_javascript:\n  - https://cdn.jsdelivr.net/npm/example@1/x.min.js\n"), encoding="utf-8")
    elif how == "no-mermaid":  # the browser-side fallback (builds without Chromium) with its loader removed
        main = project / "overrides" / "main.html"
        text = main.read_text(encoding="utf-8")
        broken = text.replace("{% if 'class=\"mermaid\"' in page.content %}", "{% if false %}")
        assert broken != text, "the Mermaid block of overrides/main.html changed: update this fixture"
        main.write_text(broken, encoding="utf-8")
    elif how == "no-jieba":
        fake = project / "no-jieba" / "jieba"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("raise ImportError('jieba hidden for this test')\n", encoding="utf-8")


@pytest.mark.parametrize("how", ["cdn-script", "no-mermaid", "no-jieba"])
def test_browser_assertions_fail_on_a_deliberately_broken_build(browser, project_copy, how):
    from conftest import build

    _break(project_copy, how)
    env = {"HANDBOOK_GIT_DATES": "false", "LABS_EXECUTE": "0", "HANDBOOK_DIAGRAMS": "client"}
    if how == "no-jieba":
        env["PYTHONPATH"] = str(project_copy / "no-jieba")
    result = build(project_copy / "mkdocs.yml", project_copy / "site", strict=False, env=env)
    if how == "no-jieba":  # caught before a browser is needed: the build stops and says why
        assert result.returncode != 0 and "jieba is not importable" in result.log and "make setup" in result.log
        return
    assert result.returncode == 0, result.log[-2000:]
    httpd, base = _serve(result.site)
    try:
        v = Visit(browser, base, "stack/")
        try:
            if how == "cdn-script":
                assert any("cdn.jsdelivr.net" in u for u in v.foreign())
            else:
                assert any("mermaid" in u for u in v.foreign()), "Material should have fetched Mermaid from a CDN"
                assert v.page.locator("div.mermaid").count() == 0, "offline, no diagram can render without the local script"
        finally:
            v.close()
    finally:
        httpd.shutdown()
