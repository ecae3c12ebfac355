"""Search as a candidate uses it (issue 30), on the built site in Debian's Chromium (Playwright).

What the index holds (tools/searchindex.py): prose, headings and code, no lab outputs, each formula once.
Named queries rank the page a reader means first, synonyms included (data/search-synonyms.yml). A query
that finds nothing offers the glossary, the question bank and related terms. The index is built once per
visit: with instant navigation (tools/instant_nav.py) a second page's first result takes milliseconds;
the figure is printed here and reported by `make bench-site` (tools/searchbench.py), never asserted.
"""
from __future__ import annotations

import json
import re
import urllib.request
from urllib.parse import urlparse

import pytest

from tools import searchbench, searchindex

from conftest import needs_chromium  # noqa: E402  (the browser fixture is conftest's)

LAB_STDOUT = re.compile(r"B=\d+ H=\d+ N=\s*\d+")  # a line the FlashAttention lab prints


class Tab:
    """One browsing context: the page, what it requested, what it logged as errors."""

    def __init__(self, browser, base: str):
        self.base = base
        self.context = browser.new_context()
        searchbench.serve_sitemap_here(self.context, base)  # instant navigation as deployed
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str = "") -> "Tab":
        self.page.goto(self.base + path)
        self.page.wait_for_load_state("networkidle")
        return self

    def search(self, query: str) -> list[str]:
        """Type the query, release a key (CJK typed by Playwright fires no key-up), wait until Material
        has answered; the result pages in order (paths under the site)."""
        box = self.page.locator(".md-search__input")
        box.click()
        searchbench.clear(self.page)
        box.fill(query)
        self.page.keyboard.press("End")
        self.page.wait_for_function(
            "() => { const m = document.querySelector('.md-search-result__meta');"
            " return m && /结果/.test(m.textContent); }", timeout=60_000)  # 找到 N 个…结果 or 没有找到…结果
        hrefs = self.page.locator(".md-search-result__item > .md-search-result__link").evaluate_all(
            "els => els.map(e => e.getAttribute('href'))")
        out = []
        for h in hrefs:
            path = urlparse(h).path.removeprefix(urlparse(self.base).path)
            if path not in out:
                out.append(path)
        return out

    def snippets(self) -> list[str]:
        return self.page.locator(".md-search-result__article").evaluate_all("els => els.map(e => e.innerText)")

    def foreign(self) -> list[str]:
        host = urlparse(self.base).netloc
        return [u for u in self.requests if urlparse(u).scheme in ("http", "https") and urlparse(u).netloc != host]

    def index_requests(self) -> int:
        return sum(urlparse(u).path.endswith("search/search_index.json") for u in self.requests)


@pytest.fixture()
def tab(browser, server):
    t = Tab(browser, server)
    yield t
    t.context.close()


# ------------------------------------------------------------------ what the index holds
@pytest.fixture(scope="module")
def index(site) -> dict:
    return json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))


def test_index_holds_no_lab_outputs_and_each_formula_once(site, index):
    docs = index["docs"]
    printed = [d["location"] for d in docs if LAB_STDOUT.search(d.get("text", ""))]
    assert not printed, f"lab outputs are indexed in {printed[:5]}"
    figures = searchindex.measure(site / "search" / "search_index.json")
    assert figures["sections with a formula repeated"] == 0, figures
    fa = next(d for d in docs if d["location"] == "operator/flash-attention/#flashattention")
    assert "ℓ" in fa["text"] and "\\ell" not in fa["text"], "the answer's formulas should read once, as text"


def test_index_holds_lab_code_in_its_own_field(index):
    lab = [d for d in index["docs"] if d["location"].startswith("operator/flash-attention-lab/")]
    code = " ".join(d.get("code", "") for d in lab)
    assert {"tl", "dot", "flash", "attention"} <= set(code.split()), "the lab's code cells should be searchable"
    assert "LAB_REPO_RAW" not in code, "the setup cell (the same in every lab) should stay out"
    assert not any("\ue000" in d.get("text", "") for d in index["docs"]), "code marks left in the snippet text"
    assert index["config"]["fields"]["code"]["boost"] < index["config"]["fields"]["text"]["boost"]


@pytest.mark.parametrize("tex,text", [
    (r"(m, \ell, \mathrm{acc})", "(m, ℓ, acc)"),
    (r"P = \operatorname{softmax}(S)", "P = softmax(S)"),
    (r"O = \operatorname{softmax}(QK^\top/\sqrt{d})\,V", "O = softmax(QK^⊤/√d) V"),
    (r"y_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}}", "y_i = (x_i - μ)/(√(σ^2 + ε))"),
    (r"\left\lceil \frac{N}{B_r} \right\rceil", "⌈ N/B_r ⌉"),
])
def test_a_formula_is_indexed_as_one_readable_line(tex, text):
    assert searchindex.readable_tex(tex) == text


def test_the_indexer_sees_formulas_once_and_lab_code_without_outputs():
    katex = ('<p>维护 <span class="math-static"><span class="katex"><span class="katex-mathml"><math><semantics><mrow>'
             '<mi>ℓ</mi></mrow><annotation encoding="application/x-tex">\\ell</annotation></semantics></math></span>'
             '<span class="katex-html" aria-hidden="true"><span class="mord">ℓ</span></span></span></span> 因子</p>')
    assert searchindex.indexable(katex) == "<p>维护 <span class=\"math-static\"> ℓ </span> 因子</p>"
    lab = ('<div class="jupyter-wrapper"><div class="jp-Cell jp-CodeCell jp-Notebook-cell celltag_setup">'
           '<pre data-search-exclude="true">LAB_ROOT = 1</pre></div>'
           '<div class="jp-Cell jp-CodeCell jp-Notebook-cell"><pre data-search-exclude="true">tl.dot(a, b)</pre>'
           '<div class="clipboard-copy-txt" data-search-exclude="true">tl.dot(a, b)</div>'
           '<div class="jp-Cell-outputWrapper"><div class="jp-OutputArea"><pre>B=1 H=2 N=  64</pre></div></div></div>'
           '<div class="jp-Cell jp-MarkdownCell jp-Notebook-cell"><p>prose</p></div></div>')
    seen = searchindex.indexable(lab)
    assert "B=1" not in seen and "prose" in seen
    assert '<pre data-search-exclude="true">LAB_ROOT = 1</pre>' in seen  # the setup cell stays out
    assert f"<pre>{searchindex.CODE_START}tl.dot(a, b){searchindex.CODE_END}</pre>" in seen
    doc = {"text": f"<p>prose</p><pre>{searchindex.CODE_START}acc = tl.dot(a, b) + tl.dot(c, d)\n"
                   f"if n&lt;2: acc{searchindex.CODE_END}</pre>"}
    searchindex.split_code(doc)
    assert doc == {"text": "<p>prose</p>", "code": "acc tl dot if"}  # its words, once each


def test_synonym_that_leads_nowhere_names_file_line_and_fix(tmp_path):
    bad = tmp_path / "search-synonyms.yml"
    bad.write_text("synonyms:\n  - {terms: [ZeRO-3], aliases: [zero3]}\n  - {terms: [ZeRO-99], aliases: [zero99]}\n",
                   encoding="utf-8")
    groups = searchindex.load_synonyms(bad)
    docs = [{"location": "framework/zero-fsdp/", "title": "ZeRO", "text": "<p>ZeRO-3 shards parameters</p>"}]
    problems = searchindex.apply_synonyms(docs, groups)
    assert len(problems) == 1 and f"{bad}:3:" in problems[0] and "'ZeRO-99'" in problems[0] and "fix:" in problems[0]
    assert "zero3" in docs[0].get("keywords", "") + docs[0].get("related", "")


# ------------------------------------------------------------------ named queries
FIRST_HITS = [
    ("FlashAttention", "operator/flash-attention/"),
    ("虚函数", "foundations/cpp/object-model/"),  # not 虚拟内存: 虚函数 is one word (tools/jieba-user-dict.txt)
    ("zero3", "framework/zero-fsdp/"),
    ("FA2", "operator/flash-attention/"),
    ("FA3", "operator/flash-attention/"),
    ("虚表", "foundations/cpp/object-model/"),
    ("TP", "framework/tensor-parallel/"),
]


@needs_chromium
@pytest.mark.parametrize("query,expected", FIRST_HITS, ids=[q for q, _ in FIRST_HITS])
def test_named_query_ranks_the_page_first(tab, query, expected):
    results = tab.open().search(query)
    assert results and results[0] == expected, f"searching {query!r}: expected {expected} first, got {results[:5]}"
    assert not tab.errors and not tab.foreign()


@needs_chromium
def test_chinese_next_to_latin_letters_is_one_query(tab):
    tab.open()
    glued, spaced = tab.search("KV缓存"), tab.search("KV 缓存")
    assert glued and glued[:3] == spaced[:3]


@needs_chromium
@pytest.mark.parametrize("query", ["FlashAttention", "在线 softmax"])
def test_snippets_carry_no_lab_output_and_no_repeated_formula(tab, query):
    tab.open().search(query)
    for text in tab.snippets():
        assert not LAB_STDOUT.search(text), f"a result for {query!r} shows lab output: {text[:200]!r}"
        assert not searchindex.formula_repeats(text), f"a result for {query!r} shows a formula's TeX beside it: {text[:200]!r}"
        assert "(m,ℓ,acc)(m" not in text.replace(" ", "")


# ------------------------------------------------------------------ no hit
@needs_chromium
@pytest.mark.parametrize("query,related", [("qzxjvkwq", None), ("饕餮", None), ("flashatention", "operator/flash-attention/")],
                         ids=["nonsense", "chinese", "typo"])
def test_no_hit_offers_glossary_question_bank_and_related_terms(tab, query, related):
    assert tab.open().search(query) == []
    box = tab.page.locator(".search-suggest")
    box.wait_for(state="visible", timeout=10_000)
    links = box.locator("a").evaluate_all("els => els.map(e => [e.textContent, e.href])")
    paths = [urlparse(href).path.removeprefix(urlparse(tab.base).path) for _, href in links]
    assert searchindex.GLOSSARY_PAGE in paths and searchindex.QUESTIONS_PAGE in paths, links
    if related:
        assert related in paths, f"{query!r} should suggest /{related}: {links}"
    for _, href in links:  # every suggestion leads to a page that exists
        with urllib.request.urlopen(href.split("#")[0], timeout=10) as r:
            assert r.status == 200
    assert not tab.errors and not tab.foreign()
    # a query that finds something hides the suggestions again
    assert tab.search("NCCL")
    assert box.is_hidden()


# ------------------------------------------------------------------ once per visit
@needs_chromium
def test_index_is_built_once_per_visit(browser, server, record_property):
    figures = searchbench.ready_after_navigation(browser, server)
    record_property("search after navigation (ms)", round(figures["after navigation (ms)"]))
    print(f"\nsearch: first page, focus to first result {figures['first page, focus to first result (ms)']:.0f} ms (index "
          f"fetched and built); after following a link, key-up to first result {figures['after navigation (ms)']:.0f} ms, "
          f"then {', '.join(f'{t:.0f}' for t in figures['all after (ms)'][1:])} ms (budget 300 ms, reported by make bench-site)")
    assert figures["same document"], "following a link reloaded the page: instant navigation is off"
    assert figures["index requests"] == 1, "the second page fetched the index again"


@needs_chromium
def test_pages_swapped_in_by_instant_navigation_work(tab):
    """A lab reached by a link typesets its math, opens its plots in the lightbox, shows its run note;
    a page of build-time math gets KaTeX's stylesheet; nothing fetches the index before search is used."""
    page = tab.open("resources/glossary/").page
    assert not page.locator(".katex").count(), "pick a first page without math"
    assert searchbench.follow_link(page, "operator/flash-attention-lab/")
    page.wait_for_function("document.querySelectorAll('.jp-MarkdownOutput .katex').length > 0", timeout=15_000)
    assert page.locator(".lab-run-note").count() == 1
    image = page.locator("a.glightbox").first
    image.scroll_into_view_if_needed()
    image.click()
    page.wait_for_selector(".glightbox-container", state="visible", timeout=10_000)
    page.keyboard.press("Escape")
    page.wait_for_selector(".glightbox-container", state="detached", timeout=10_000)
    assert searchbench.follow_link(page, "operator/roofline/")
    page.wait_for_function("() => { const k = document.querySelector('.math-static .katex');"
                           " return k && getComputedStyle(k).fontFamily.includes('KaTeX'); }", timeout=15_000)
    page.go_back()
    page.wait_for_function("location.pathname.endsWith('/operator/flash-attention-lab/')", timeout=15_000)
    page.wait_for_selector(".lab-run-note")
    assert tab.index_requests() == 0, "a page requested the search index before search was used"
    assert tab.search("FlashAttention")
    assert tab.index_requests() == 1
    assert not tab.errors, tab.errors
    assert not tab.foreign(), tab.foreign()
