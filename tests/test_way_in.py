"""A way in (issue 30, item 5): the home page's 路线图, the lab catalogue and the offline-edition links.

In a real browser (Debian's chromium through Playwright, as in tests/test_browser.py), on the site the
session builds (`site`/`server` fixtures, tests/conftest.py):
- the roadmap heading is within the first viewport at 1440×900 (and on a 390×844 phone), in both palettes;
- the two-week sprint has 14 days, each with pages to read, and its labs and questions;
- every link on the home page resolves on the local server (HTTP 200, and its #anchor exists there);
- the lab catalogue lists every notebook under notebooks/ with a link that opens the lab;
- the home page links the PDF and the one-page edition exactly when the build made them.
Without a browser: tools/wayin.py writes the offline links only for a build that makes the edition, and
its catalogue lists a lab that has no line in data/labs.yml, and rejects a line for a lab that does not exist.
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote, urldefrag, urljoin, urlparse

import pytest

from conftest import ROOT
from tools import labs, wayin

from conftest import needs_chromium  # noqa: E402  (browser and visit are conftest fixtures)

DESKTOP = {"width": 1440, "height": 900}
# every link's absolute URL (an SVG <a> has no string .href; instant navigation may rewrite the attribute)
HREFS = "els => els.map(e => new URL(e.getAttribute('href'), document.baseURI).href)"
PHONE = {"width": 390, "height": 844}


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
            kind = r.headers.get("Content-Type", "")
            return r.status, body.decode("utf-8", errors="replace") if "html" in kind else ""
    except urllib.error.HTTPError as exc:
        return exc.code, ""


# ------------------------------------------------------------------ in the browser

@needs_chromium
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("device", ["desktop", "phone"])
def test_roadmap_heading_is_in_the_first_viewport(visit, device, scheme):
    size = DESKTOP if device == "desktop" else PHONE
    v = visit("", viewport=size, color_scheme=scheme, is_mobile=device == "phone")
    heading = v.page.locator("h2#路线图")
    assert heading.count() == 1, "the home page has no '## 路线图' heading"
    box = heading.bounding_box()
    assert box is not None and heading.is_visible()
    assert 0 <= box["y"] and box["y"] + box["height"] <= size["height"], (
        f"the roadmap heading is at {box['y']:.0f}–{box['y'] + box['height']:.0f} px, below the first "
        f"{size['height']} px of a {size['width']}×{size['height']} screen")
    # the three ways in are tabs right under it: the sprint, the reading order, the role tracks
    labels = v.page.locator(".tabbed-labels > label").all_inner_texts()
    assert labels[:3] == ["两周面试冲刺", "逐层精读", "按岗位"], labels[:3]
    assert not v.foreign()


@needs_chromium
def test_sprint_has_fourteen_days_of_pages_labs_and_questions(visit, server):
    v = visit("", viewport=DESKTOP)
    days = v.page.locator(".roadmap-sprint > ol > li")
    assert days.count() == 14, f"the two-week sprint has {days.count()} days"
    for i in range(14):
        hrefs = days.nth(i).locator("a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
        text = days.nth(i).inner_text()
        assert "读" in text and len(hrefs) >= 3, f"day {i + 1} names too little to do: {text}"
        assert any("#" in h for h in hrefs), f"day {i + 1} links no questions (面试追问 or the question bank): {text}"
    labs_linked = {urlparse(h).path.removeprefix(urlparse(server).path) for h in v.page.locator(".roadmap-sprint a")
                   .evaluate_all(HREFS) if "#" not in h}
    nb_urls = {nb.relative_to(labs.NOTEBOOKS).with_suffix("").as_posix() + "/" for nb in labs.iter_notebooks()}
    assert len(nb_urls & labs_linked) >= 10, "the sprint should run a lab on most days"


@needs_chromium
def test_every_link_on_the_home_page_resolves(visit, server, site):
    v = visit("", viewport=DESKTOP)
    hrefs = v.page.locator("a[href]").evaluate_all(HREFS)
    host = urlparse(server).netloc
    local = sorted({h for h in hrefs if urlparse(h).netloc == host})
    if (site / "print_page" / "index.html").is_file() and not (site / "handbook.pdf").is_file():
        # a build with the one-page edition links the PDF that tools/pdf.py prints after it
        local = [h for h in local if not urlparse(h).path.endswith("/handbook.pdf")]
    assert len(local) > 100, f"only {len(local)} links on the home page: is the roadmap there?"
    pages: dict[str, tuple[int, str]] = {}
    broken = []
    for href in local:
        url, fragment = urldefrag(href)
        if url not in pages:
            pages[url] = _get(url)
        status, html = pages[url]
        if status != 200:
            broken.append(f"{href}: HTTP {status}")
        elif fragment and html:
            ids = _Ids()
            ids.feed(html)
            if unquote(fragment) not in ids.ids:
                broken.append(f"{href}: no element with id {unquote(fragment)!r}")
    assert not broken, "links on the home page that do not resolve:\n" + "\n".join(broken)


@needs_chromium
def test_lab_catalogue_lists_every_lab_with_a_working_link(visit, server):
    v = visit("resources/labs/", viewport=DESKTOP)
    rows = v.page.locator("article table tbody tr")
    found = {}
    for i in range(rows.count()):
        cells = rows.nth(i).locator("td")
        link = cells.nth(0).locator("a")
        found[urlparse(urljoin(v.page.url, link.get_attribute("href"))).path] = [cells.nth(k).inner_text() for k in range(4)]
    base = urlparse(server).path
    missing, broken = [], []
    for nb in labs.iter_notebooks():
        path = base + nb.relative_to(labs.NOTEBOOKS).with_suffix("").as_posix() + "/"
        if path not in found:
            missing.append(labs.rel(nb))
            continue
        name, asserts, took, gpu = found[path]
        assert asserts.strip() and took.strip() and gpu.strip(), f"{labs.rel(nb)}: an empty cell in its row"
        status, html = _get(urljoin(server, path.removeprefix(base)))
        if status != 200 or 'class="lab-buttons"' not in html:  # a lab page has the Colab/download buttons
            broken.append(f"{labs.rel(nb)}: {path} gives HTTP {status}, not the lab's page")
    assert not missing, f"labs missing from the catalogue: {missing}"
    assert not broken, "\n".join(broken)
    assert len(found) == len(labs.iter_notebooks()), "the catalogue lists something that is not a lab"


@needs_chromium
def test_home_page_links_the_offline_edition_only_when_the_build_made_it(visit, site):
    v = visit("", viewport=DESKTOP)
    links = v.page.locator("a[href]").evaluate_all(HREFS)
    made_edition = (site / "print_page" / "index.html").is_file()
    to_pdf = [h for h in links if h.split("#")[0].endswith(".pdf")]
    to_edition = [h for h in links if "print_page" in h]
    if made_edition:
        assert to_pdf and to_edition, "this build made the one-page edition, but the home page does not link it"
    else:
        assert not to_pdf and not to_edition, f"the build made no offline edition, yet the home page links {to_pdf + to_edition}"
        text = v.page.locator("article").inner_text() + v.page.locator("footer").inner_text()
        assert "PDF" not in text and "单页版" not in text, "the home page mentions an offline edition this build did not make"


# ------------------------------------------------------------------ tools/wayin.py without a browser

def _config(enabled: bool) -> dict:
    plugin = SimpleNamespace(config={"enabled": enabled, "path_to_pdf": "handbook.pdf"})
    return {"plugins": {"print-site": plugin}, "use_directory_urls": True}


def test_offline_links_follow_the_print_site_switch():
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert wayin.OFFLINE_MARK in home, "docs/index.md lost the marker where the offline links go"
    page = SimpleNamespace(url="")
    off = wayin.page_markdown(home, page, _config(False))
    assert wayin.OFFLINE_MARK not in off and "print_page" not in off and "handbook.pdf" not in off
    on = wayin.page_markdown(home, page, _config(True))
    assert '<a href="print_page/">' in on and '<a href="handbook.pdf">' in on
    deep = wayin.page_markdown(wayin.OFFLINE_MARK, SimpleNamespace(url="resources/offline-edition/"), _config(True))
    assert 'href="../../print_page/"' in deep and 'href="../../handbook.pdf"' in deep
    assert wayin.offline_edition({"plugins": {}}) is None


def test_catalogue_lists_every_lab_even_without_a_line_or_a_run(tmp_path, monkeypatch):
    sources = labs.iter_notebooks()
    data = tmp_path / "labs.yml"
    data.write_text("asserts: {}\n", encoding="utf-8")
    monkeypatch.setattr(wayin, "ASSERTS", data)
    page = wayin.lab_catalogue(sources, {})
    for nb in sources:
        assert f"(../{nb.relative_to(labs.NOTEBOOKS).as_posix()})" in page, f"{labs.rel(nb)} is not in the catalogue"
    rows = [line for line in page.splitlines() if line.startswith("| [")]
    assert len(rows) == len(sources)
    assert all(line.split(" | ")[1].strip() for line in rows), "a lab without a line in data/labs.yml got no description"
    assert page.count("未执行") >= len(sources)
    for nb in sources:  # the fallback line: a sentence of the lab's own introduction, not a pointer elsewhere
        line = wayin.first_sentence(json.loads(nb.read_text(encoding="utf-8")))
        assert 8 < len(line) <= 150 and not line.startswith(wayin._POINTERS), f"{labs.rel(nb)}: {line!r}"


def test_every_line_of_data_labs_yml_names_a_lab_and_a_stale_one_fails(tmp_path, monkeypatch):
    import yaml
    from mkdocs.exceptions import PluginError

    keys = set(yaml.safe_load(wayin.ASSERTS.read_text(encoding="utf-8"))["asserts"])
    lab_keys = {nb.relative_to(labs.NOTEBOOKS).with_suffix("").as_posix() for nb in labs.iter_notebooks()}
    assert keys <= lab_keys, f"data/labs.yml names labs that do not exist: {sorted(keys - lab_keys)}"
    stale = tmp_path / "labs.yml"
    stale.write_text("asserts:\n  operator/no-such-lab: 断言什么也没有。\n", encoding="utf-8")
    monkeypatch.setattr(wayin, "ASSERTS", stale)
    with pytest.raises(PluginError, match=re.escape("operator/no-such-lab")):
        wayin.lab_catalogue(labs.iter_notebooks(), {})


def test_readme_is_a_contributors_way_in():
    """About two screens; the two commands, the folder map, how to contribute and CI stay; the long
    measurement narratives are pages of their own under docs/resources/ that the README links."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 110, f"README.md has {len(readme.splitlines())} lines"
    for must in ("make serve", "make test", "## 目录", "## 怎样参与", ".ci/run", "CONTRIBUTING.md"):
        assert must in readme, f"README.md lost {must!r}"
    for page in ("gpu-records", "site-performance", "offline-edition", "dependencies"):
        assert (ROOT / "docs" / "resources" / f"{page}.md").is_file()
        assert f"resources/{page}/" in readme, f"README.md does not link docs/resources/{page}.md"
    nav = (ROOT / "docs" / "resources" / ".nav.yml").read_text(encoding="utf-8")
    assert all(name in nav for name in ("labs.md", "gpu-records.md", "site-performance.md", "offline-edition.md"))
    assert Path(ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("make test")
