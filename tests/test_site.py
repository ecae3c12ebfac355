"""The real site: strict build, links and anchors, navigation, search index, offline pages, serve."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from conftest import ROOT, BUILD_ENV
from tools import checks, labs


def test_strict_build_has_no_warnings(site_build):
    assert site_build.returncode == 0 and not site_build.warnings(), "\n".join(site_build.warnings()) or site_build.log[-3000:]


def test_every_internal_link_and_anchor_resolves(site):
    problems = checks.check_site(site)
    assert not problems, "\n".join(map(str, problems))


def test_every_page_and_lab_is_in_the_navigation(site):
    sitemap = (site / "sitemap.xml").read_text(encoding="utf-8")
    home = (site / "index.html").read_text(encoding="utf-8")
    nav_links = set(re.findall(r'class="md-nav__link[^"]*"[^>]*href="([^"]+)"', home)) | set(
        re.findall(r'href="([^"]+)"[^>]*class="md-nav__link', home))
    nav_pages = {Path(h.split("#")[0]).as_posix().strip("./") for h in nav_links}
    pages = [p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md")]
    pages += [p.relative_to(labs.NOTEBOOKS).with_suffix("") for p in labs.iter_notebooks()]
    missing = []
    for page in pages:
        url = page.parent.as_posix() if page.name == "index" else page.as_posix()
        url = "" if url == "." else url
        if url not in nav_pages:
            missing.append(url or "(home)")
        assert f"/{url}/" in sitemap or url == "", f"{url} is not in sitemap.xml"
    assert not missing, f"pages missing from the navigation of the home page: {missing}"


def test_labs_are_listed_in_their_section(site):
    html = (site / "operator" / "index.html").read_text(encoding="utf-8")
    assert 'href="vector-add/"' in html, "the vector-add lab is not in the operator section's navigation"


def test_search_index_is_segmented_with_jieba_and_the_user_dictionary(site):
    assert not checks.check_search_index(site)
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    sep = re.compile(index["config"]["separator"])
    words = {w for d in index["docs"] for w in sep.split(d["title"] + " " + d["text"]) if w}
    for term in ("共享内存", "访存密集型", "算子融合", "量化", "张量并行"):  # user dictionary + jieba
        assert term in words, f"'{term}' is not a word of the search index"
    for term in ("FlashAttention", "syncthreads", "ZeRO"):
        assert any(term in w for w in words), f"'{term}' is not in the search index"
    assert "stemmer" not in index["config"]["pipeline"]


def test_search_indexes_a_labs_prose_and_outputs_but_not_its_code(site):
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    lab = " ".join(d["text"] for d in index["docs"] if d["location"].startswith("operator/vector-add/"))
    assert "网格跨步" in lab.replace("\u200b", ""), "the lab's prose is missing from the search index"
    assert "LAB_PACKAGES" not in lab and "def vector_add_triton" not in lab, "the lab's code is in the search index"
    assert "Copied!" not in lab and "In [" not in lab
    html = (site / "operator" / "vector-add" / "index.html").read_text(encoding="utf-8")
    assert "LAB_PACKAGES" in html and "data-search-exclude" not in html  # still on the page; the mark is gone


def test_pages_reference_no_other_host(site):
    """Scripts, styles, images and fonts all come from the site itself (links to other sites are fine)."""
    foreign = [p for p in checks.check_site(site) if "from another host" in p.message]
    assert not foreign, "\n".join(map(str, foreign))
    css = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in site.rglob("*.css"))
    assert "fonts.googleapis" not in css and "fonts.gstatic" not in css


def test_math_and_diagrams_are_self_hosted_and_loaded_only_where_needed(site):
    hardware = (site / "hardware" / "index.html").read_text(encoding="utf-8")
    home = (site / "index.html").read_text(encoding="utf-8")
    resources = (site / "resources" / "tags" / "index.html").read_text(encoding="utf-8")  # no math, no diagram
    stack = (site / "stack" / "index.html").read_text(encoding="utf-8")
    lab = (site / "operator" / "vector-add" / "index.html").read_text(encoding="utf-8")
    # Markdown pages: math typeset at build time needs KaTeX's stylesheet, not its script; diagrams are
    # inline SVG with an accessible name, and Mermaid is not loaded. Lab pages typeset $…$ in the browser.
    assert "assets/vendor/katex/katex.min.css" in hardware and "katex.min.js" not in hardware
    assert 'class="math-static"' in hardware
    assert "assets/vendor/katex/katex.min.js" in lab
    assert 'class="mermaid mermaid-static" role="img" aria-label="示意图：' in stack and "mermaid.esm" not in stack
    assert "mermaid" not in home, "the home page draws its map as inline SVG and needs no Mermaid"
    assert "arithmatex" not in resources and "katex" not in resources  # no math there, no KaTeX
    assert 'class="mermaid"' not in resources and "mermaid.esm" not in resources
    assert (site / "assets" / "vendor" / "katex" / "katex.min.js").is_file()
    assert list((site / "assets" / "vendor" / "katex" / "fonts").glob("*.woff2"))
    assert (site / "assets" / "vendor" / "mermaid" / "mermaid.esm.min.mjs").is_file()


def test_glossary_tooltips_are_on_every_markdown_page(site):
    html = (site / "operator" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<abbr title="流式多处理器（Streaming Multiprocessor）">SM</abbr>', html)


def test_no_github_api_call_for_repository_facts(site):
    html = (site / "index.html").read_text(encoding="utf-8")
    assert 'data-md-component="source"' not in html and "api.github.com" not in html


def test_all_chinese_headings_get_stable_non_empty_anchors(site):
    html = (site / "operator" / "index.html").read_text(encoding="utf-8")
    assert 'id="访存密集型还是计算密集型"' in html
    lab = (site / "operator" / "vector-add" / "index.html").read_text(encoding="utf-8")
    ids = re.findall(r'<h2 id="([^"]*)"', lab)
    assert ids and all(ids), f"lab headings without anchors: {ids}"
    assert "1-线程层次与下标计算" in ids


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_on_home_and_a_layer_page(site):
    """`make serve` runs `mkdocs serve`: it must answer 200 on / and on a layer page."""
    port = _free_port()
    env = {**BUILD_ENV, "SITE_URL": f"http://127.0.0.1:{port}/"}  # as `make serve` does
    proc = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "--dev-addr", f"127.0.0.1:{port}", "--no-livereload"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        prefix = "/"
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{prefix}", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "mkdocs serve did not answer within 300 s"
                time.sleep(1)
        for path in ("operator/", "operator/vector-add/"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{prefix}{path}", timeout=10) as r:
                assert r.status == 200, path
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_stack_walkthroughs_link_every_step(site):
    """Both walkthroughs of the stack page (the 100B-parameter LLM, one softmax) link each layer's step."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((site / "stack" / "index.html").read_text(encoding="utf-8"), "lxml")
    steps = [p for p in soup.select("article p") if p.find("strong") and p.find("strong").get_text().startswith("第 ")]
    assert len(steps) == 7 and all(p.find("a", href=True) for p in steps), [p.get_text()[:20] for p in steps]
    heading = soup.find(id="一个算子穿过七层softmax")
    rows = heading.find_next("table").select("tbody tr")
    assert len(rows) == 7 and all(r.find_all("td")[-1].find("a", href=True) for r in rows)
