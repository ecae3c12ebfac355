"""How the built site reads on a 390 px phone and a 1440 px desktop, in the light and the dark palette (issue 30).

Diagrams: every label of every diagram at 11 px or more at both widths, and a click opens the diagram
full screen with zoom (tools/diagrams.py, docs/assets/javascripts/diagram-zoom.js). Labs: code and
outputs use the column's width on a phone. No sampled page scrolls sideways on a phone. Formulas that
overflow the column carry a scroll cue (scroll-cue.js), and rows of formulas wrap. The smaller things:
a Chinese 404 page, glossary tooltips once per page and never in headings (tools/reader.py), plot alt
texts, lab tables of contents without raw TeX, the home page's title, the lab edit link, and the
sticky first column of wide tables. Runs on the real site (the session's `site` and `server` fixtures).
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from conftest import needs_chromium  # noqa: E402  (browser and server are conftest fixtures)

from tools import reader

pytestmark = needs_chromium
SCREENS = {  # the two readers
    390: {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True},
    1440: {"viewport": {"width": 1440, "height": 900}},
}
PALETTES = ["light", "dark"]
LABEL_MIN_PX = 11.0


@pytest.fixture()
def open_page(browser, server):
    """open_page(width, palette) -> a Playwright page; goto(path) loads a page of the site and waits for it."""
    contexts = []

    def _open(width: int, palette: str = "light", touch: bool = True):
        screen = SCREENS[width] if touch else {"viewport": SCREENS[width]["viewport"]}
        context = browser.new_context(color_scheme=palette, **screen)
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.js_errors = errors

        def goto(path: str, settle: bool = True):
            # settle: wait for images and fonts (widths of text and formulas); a diagram's scale needs neither
            page.goto(server + path, wait_until="load" if settle else "domcontentloaded")
            if settle:
                page.wait_for_function("document.fonts.status === 'loaded'")
            scheme = page.evaluate("document.body.getAttribute('data-md-color-scheme')")
            assert scheme == ("slate" if palette == "dark" else "default"), f"/{path}: palette {scheme}"

        page.visit = goto
        return page

    yield _open
    for c in contexts:
        c.close()


# ------------------------------------------------------------------ the site's pages, from its HTML
def _pages(site: Path) -> dict[str, str]:
    out = {}
    for f in sorted(site.rglob("index.html")):
        rel = f.parent.relative_to(site).as_posix()
        if rel.startswith(("assets", "print_page")):
            continue
        out["" if rel == "." else rel + "/"] = f.read_text(encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def pages(site) -> dict[str, str]:
    return _pages(site)


def _diagram_pages(pages):
    return [p for p, text in pages.items() if 'class="diagram' in text]


def _lab_pages(pages):
    return [p for p, text in pages.items() if 'class="jupyter-wrapper"' in text]


def _widest_diagrams(pages, n):
    def width(text):
        return max((float(w) for w in re.findall(r'<svg data-label-px="[\d.]+" [^>]*?viewBox="[-\d.]+ [-\d.]+ ([\d.]+)', text)),
                   default=0.0)
    return sorted(_diagram_pages(pages), key=lambda p: -width(pages[p]))[:n]


def _widest_tables(pages, n):
    def columns(text):
        return max((len(re.findall(r"<th\b", head)) for head in re.findall(r"<thead>(.*?)</thead>", text, re.S)), default=0)
    return sorted((p for p in pages if "<table" in pages[p]), key=lambda p: -columns(pages[p]))[:n]


def _most_formulas(pages, n):
    return sorted(pages, key=lambda p: -pages[p].count('class="katex-display"'))[:n]


# ------------------------------------------------------------------ diagrams
@pytest.mark.parametrize("width", [1440, 390])
def test_every_diagram_label_is_at_least_11px(open_page, pages, width):
    """Every diagram of the site, in the light palette and then (same load, Material's attribute) the dark one."""
    paths = _diagram_pages(pages)
    assert len(paths) >= 50, f"only {len(paths)} pages with diagrams: did the build stop rendering them?"
    page = open_page(width, "light")
    small, count = [], 0
    for path in paths:
        page.visit(path, settle=False)
        for palette in PALETTES:
            if palette == "dark":
                page.evaluate("document.body.setAttribute('data-md-color-scheme', 'slate')")
            for d in page.evaluate(reader.DIAGRAM_LABELS_JS):
                count += 1
                assert not d.get("hidden"), f"/{path}: diagram {d['index']} shows no variant at {width} px"
                if d["min"] is not None and d["min"] < LABEL_MIN_PX:
                    small.append(f"/{path} #{d['index']} ({palette}) {d['label']!r}: {d['min']} px")
    assert count >= 200
    assert not small, f"{len(small)} of {count} diagrams have labels under {LABEL_MIN_PX:g} px at {width} px:\n" + "\n".join(small[:20])
    assert not page.js_errors, page.js_errors


def _open_diagram(page, how: str):
    diagram = page.locator(".diagram").first
    diagram.scroll_into_view_if_needed()
    if how == "tap":
        diagram.locator(":scope > .mermaid:visible").tap()
    elif how == "click":
        diagram.locator(":scope > .mermaid:visible").click()
    else:  # keyboard: Tab to the button, Enter
        diagram.locator(".diagram__zoom").focus()
        page.keyboard.press("Enter")
    page.wait_for_selector("dialog.diagram-zoom[open]")


@pytest.mark.parametrize("palette", PALETTES)
@pytest.mark.parametrize("width", [390, 1440])
def test_a_diagram_opens_full_screen_zooms_and_closes(open_page, pages, width, palette):
    path = _widest_diagrams(pages, 1)[0]
    page = open_page(width, palette)
    page.visit(path)
    in_page = page.locator(".diagram").first.locator("svg[data-label-px]").count()
    _open_diagram(page, "tap" if width == 390 else "click")
    box = page.evaluate("(() => { const r = document.querySelector('dialog.diagram-zoom').getBoundingClientRect();"
                        " return [r.width, r.height, innerWidth, innerHeight]; })()")
    assert box[0] >= box[2] - 1 and box[1] >= box[3] - 1, f"the overlay is not full screen: {box}"
    assert page.locator("dialog.diagram-zoom svg[data-label-px]").count() == 1
    labels = page.evaluate(reader.DIAGRAM_LABELS_JS.replace(".diagram, .mermaid-static", ".diagram-zoom__canvas")
                           .replace("d.classList.contains('diagram')", "false"))
    assert labels and labels[0]["min"] >= 13, f"opened at {labels}: labels should be at least 13 px"
    before = float(page.get_attribute("dialog.diagram-zoom", "data-zoom"))
    page.keyboard.press("+")
    page.locator("[data-zoom-action=in]").click()
    after = float(page.get_attribute("dialog.diagram-zoom", "data-zoom"))
    assert after > before * 1.4, (before, after)
    page.keyboard.press("0")  # fit
    page.keyboard.press("Escape")
    page.wait_for_selector("dialog.diagram-zoom[open]", state="detached")
    # the dialog's close event (which moves the SVG back) is queued after `open` goes: wait for it, bounded
    page.wait_for_function("n => document.querySelector('.diagram').querySelectorAll('svg[data-label-px]').length === n",
                           arg=in_page, timeout=5_000)
    assert page.locator(".diagram").first.locator("svg[data-label-px]").count() == in_page, "the diagram did not return"
    assert page.locator("dialog.diagram-zoom svg").count() == 0
    # the keyboard way in: the corner button, then Enter; focus comes back to it on close
    _open_diagram(page, "keyboard")
    page.keyboard.press("Escape")
    assert page.evaluate("document.activeElement.classList.contains('diagram__zoom')")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert not page.js_errors, page.js_errors


def test_a_pinch_zooms_the_open_diagram(open_page, pages):
    """Two touch points moving apart zoom in (CDP touch events: what a phone's pinch sends)."""
    page = open_page(390)
    page.visit(_widest_diagrams(pages, 1)[0])
    _open_diagram(page, "tap")
    before = float(page.get_attribute("dialog.diagram-zoom", "data-zoom"))
    cdp = page.context.new_cdp_session(page)

    def touch(kind, points):
        cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": [{"x": x, "y": y, "id": i} for i, (x, y) in enumerate(points)]})

    touch("touchStart", [(150, 400), (240, 400)])
    for step in range(1, 6):
        touch("touchMove", [(150 - 15 * step, 400), (240 + 15 * step, 400)])
    touch("touchEnd", [])
    after = float(page.get_attribute("dialog.diagram-zoom", "data-zoom"))
    assert after > before * 1.5, (before, after)


# ------------------------------------------------------------------ labs on a phone
def test_lab_code_uses_the_column_on_a_phone(open_page, pages):
    labs = _lab_pages(pages)
    assert len(labs) >= 3
    sample = [p for p in ("operator/vector-add/", "operator/flash-attention-lab/", "operator/layernorm-lab/") if p in labs]
    sample += [p for p in labs if p not in sample][: max(0, 4 - len(sample))]
    page = open_page(390)
    for path in sample:
        page.visit(path)
        ratios = page.evaluate("""() => {
            const column = document.querySelector('.md-content__inner').getBoundingClientRect().width;
            return [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-editor, .jp-OutputArea-output')]
                .filter(e => !e.closest('details:not([open])'))  // the folded setup cell
                .map(e => e.getBoundingClientRect().width).filter(w => w > 0).map(w => w / column);
        }""")
        assert ratios, f"/{path}: no code cell"
        assert min(ratios) >= 0.9, f"/{path}: a code or output box is {min(ratios):.0%} of the column at 390 px"
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, f"/{path} scrolls sideways"


# ------------------------------------------------------------------ no page scrolls sideways on a phone
@pytest.mark.parametrize("palette", PALETTES)
def test_no_page_scrolls_sideways_on_a_phone(open_page, pages, palette):
    labs = _lab_pages(pages)
    sample = list(dict.fromkeys(["", *_widest_diagrams(pages, 6), *_widest_tables(pages, 5), *_most_formulas(pages, 5),
                                 "operator/layernorm/", *labs[:2], *[p for p in ("operator/vector-add/",
                                 "operator/flash-attention-lab/") if p in labs]]))
    assert len([p for p in sample if p in labs]) >= 3
    page = open_page(390, palette)
    wide = []
    for path in sample:
        page.visit(path)
        w = page.evaluate("document.documentElement.scrollWidth")
        if w > 390:
            culprit = page.evaluate("""() => [...document.querySelectorAll('body *')]
                .filter(e => e.getBoundingClientRect().right > innerWidth + 1 && getComputedStyle(e).position !== 'fixed')
                .slice(-1).map(e => e.tagName + '.' + [...e.classList].join('.'))[0]""")
            wide.append(f"/{path}: {w} px ({culprit})")
    assert not wide, "pages wider than a 390 px phone:\n" + "\n".join(wide)


# ------------------------------------------------------------------ formulas
CUE_JS = """() => [...document.querySelectorAll('.md-typeset .katex-display')].map(e => ({
    over: e.scrollWidth > e.clientWidth + 1, cue: e.getAttribute('data-scroll'),
    mask: getComputedStyle(e).maskImage || getComputedStyle(e).webkitMaskImage}))"""


@pytest.mark.parametrize("palette", PALETTES)
@pytest.mark.parametrize("width", [390, 1440])
def test_overflowing_formulas_carry_a_scroll_cue(open_page, pages, width, palette):
    page = open_page(width, palette)
    overflowing = 0
    for path in _most_formulas(pages, 6) + ["operator/layernorm/"]:
        page.visit(path)
        page.wait_for_timeout(100)
        for i, f in enumerate(page.evaluate(CUE_JS)):
            if f["over"]:
                overflowing += 1
                assert f["cue"] == "start" and f["mask"] not in ("", "none"), f"/{path}: formula {i} overflows without a cue: {f}"
    if width == 390:
        assert overflowing > 0, "no formula overflows a phone's column: the sample no longer tests the cue"
        # scrolled to its end, the cue moves to the other edge
        page.visit(_most_formulas(pages, 1)[0])
        flipped = page.evaluate("""async () => {
            const e = [...document.querySelectorAll('.md-typeset .katex-display')].find(e => e.scrollWidth > e.clientWidth + 1);
            if (!e) return 'none';
            e.scrollLeft = e.scrollWidth;
            await new Promise(r => setTimeout(r, 100));
            return e.getAttribute('data-scroll');
        }""")
        assert flipped in ("end", "none")


def test_the_layernorm_definition_is_a_row_that_wraps(open_page):
    """It was one line that overflowed and ended at "…r +"; now four formulas, each whole on the screen."""
    for width in (1440, 390):
        page = open_page(width)
        page.visit("operator/layernorm/")
        rows = page.evaluate("""() => [...document.querySelectorAll('.math-row')].map(r => ({
            parts: r.querySelectorAll('.katex-display').length,
            over: [...r.querySelectorAll('.katex-display')].filter(e => e.scrollWidth > e.clientWidth + 1).length,
            text: r.textContent}))""")
        definition = [r for r in rows if "μ" in r["text"] and "σ" in r["text"] and "β" in r["text"]]
        assert definition, rows
        assert definition[0]["parts"] == 4 and definition[0]["over"] == 0, definition[0]


# ------------------------------------------------------------------ the smaller things
def test_the_404_page_is_chinese(site):
    text = (site / "404.html").read_text(encoding="utf-8")
    assert 'lang="zh"' in text and re.search(r"<title>404：[^<]*</title>", text)
    body = re.sub(r"<[^>]+>", " ", text.split('class="md-content__inner', 1)[1].split("</article>")[0])
    assert "404" in body and "页面" in body and "搜索" in body and "Not found" not in body
    assert 'href="' in text.split('class="md-content__inner', 1)[1], "the 404 page links nowhere"


_HEADINGS = re.compile(r"<(h[1-6])\b[^>]*>(.*?)</\1>", re.S)


def test_glossary_tooltips_once_per_page_and_never_in_headings(pages, open_page):
    in_headings, repeated, total = [], [], 0
    for path, text in pages.items():
        article = text.split('<article', 1)[-1].split("</article>", 1)[0]
        for _, heading in _HEADINGS.findall(article):
            if "<abbr" in heading:
                in_headings.append(f"/{path}: {re.sub('<[^>]+>', '', heading)[:60]}")
        terms = [html.unescape(t) for t in re.findall(r"<abbr\b[^>]*>(.*?)</abbr>", article, re.S)]
        total += len(terms)
        repeated += [f"/{path}: {t}" for t in sorted({t for t in terms if terms.count(t) > 1})]
    assert total > 100, "glossary tooltips are gone altogether"
    assert not in_headings, f"{len(in_headings)} headings carry a glossary tooltip:\n" + "\n".join(in_headings[:10])
    assert not repeated, f"{len(repeated)} terms have a tooltip more than once on a page:\n" + "\n".join(repeated[:10])
    page = open_page(1440)
    page.visit("operator/")
    assert page.evaluate("document.querySelectorAll('h1 abbr, h2 abbr, h3 abbr, h4 abbr, .md-nav abbr').length") == 0


def test_lab_plots_have_alt_text(pages):
    labs = _lab_pages(pages)
    images, bad = 0, []
    for path in labs:
        for alt in re.findall(r'<img\b[^>]*?\balt="([^"]*)"[^>]*src="data:image', pages[path]):
            images += 1
            if not alt.strip() or reader.DEFAULT_ALT in alt:
                bad.append(f"/{path}: {alt!r}")
    assert images >= 20, f"only {images} lab plots found"
    assert not bad, f"{len(bad)} plots have no real alt text:\n" + "\n".join(bad[:10])


def test_lab_tables_of_contents_show_no_raw_tex(pages, open_page):
    raw = []
    for path in _lab_pages(pages):
        toc = pages[path].split('md-nav--secondary', 1)[-1].split("</nav>", 1)[0]
        for title in re.findall(r'<span class="md-ellipsis">(.*?)</span>', toc, re.S):
            if "$" in title or "\\(" in title:
                raw.append(f"/{path}: {' '.join(title.split())}")
    assert not raw, "lab tables of contents show raw TeX:\n" + "\n".join(raw)
    page = open_page(1440)
    page.visit("operator/flash-attention-lab/")
    toc = page.locator("nav.md-nav--secondary").last.inner_text()
    assert "$" not in toc and "重算 P" in toc


def test_the_home_page_title_names_the_site_once(pages):
    from conftest import ROOT

    site = re.search(r"^site_name:\s*(.+?)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M).group(1)
    title = re.search(r"<title>(.*?)</title>", pages[""], re.S).group(1).strip()
    assert title.count(site) == 1, title
    other = re.search(r"<title>(.*?)</title>", pages["operator/"], re.S).group(1)
    assert other.endswith(f"- {site}") and other.count(site) == 1, other


def test_lab_edit_link_opens_the_rendered_notebook(pages):
    for path in _lab_pages(pages)[:10]:
        text = pages[path]
        edits = re.findall(r'<a\b[^>]*\brel="edit"[^>]*>', text)
        assert len(edits) == 1, f"/{path}: {len(edits)} edit links"
        href = re.search(r'href="([^"]+)"', edits[0]).group(1)
        assert "/blob/" in href and href.endswith(".ipynb"), f"/{path}: edit link {href}"
        assert not re.search(r'href="[^"]*/(?:edit|raw)/[^"]*\.ipynb"', text), f"/{path} links the notebook's raw JSON"


@pytest.mark.parametrize("palette", PALETTES)
def test_a_wide_tables_first_column_stays_in_view(open_page, pages, palette):
    page = open_page(390, palette)
    checked = 0
    for path in _widest_tables(pages, 5):
        page.visit(path)
        result = page.evaluate("""async () => {
            const wrap = [...document.querySelectorAll('.md-typeset__scrollwrap')].find(w => w.scrollWidth > w.clientWidth + 40);
            if (!wrap) return null;
            wrap.scrollIntoView();
            const cell = wrap.querySelector('tbody tr td:first-child');
            const before = cell.getBoundingClientRect().left;
            wrap.scrollLeft = wrap.scrollWidth;
            await new Promise(r => setTimeout(r, 50));
            const after = cell.getBoundingClientRect().left, edge = wrap.getBoundingClientRect().left;
            const bg = getComputedStyle(cell).backgroundColor;
            return {before, after, edge, scrolled: wrap.scrollLeft, bg};
        }""")
        if result is None:
            continue
        checked += 1
        assert result["scrolled"] > 0
        assert abs(result["after"] - result["edge"]) <= 2 and result["after"] >= result["before"] - 20, f"/{path}: {result}"
        assert result["bg"] not in ("rgba(0, 0, 0, 0)", "transparent"), f"/{path}: the sticky column is see-through"
    assert checked >= 1, "no table in the sample is wider than a phone"


@pytest.mark.parametrize("width", [390, 1440])
def test_no_serious_accessibility_violation_with_a_diagram_open_or_a_table_scrolled(open_page, pages, width):
    """axe-core (pinned in package.json) on the widest diagram's page with the full-screen view open, and on
    the page of the widest table (its scrolling wrapper must be reachable by keyboard). A narrow window
    with a keyboard, not a touch screen: Material makes scrolling code focusable only where there is hover."""
    from conftest import ROOT

    page = open_page(width, touch=False)
    for path, open_diagram in ((_widest_diagrams(pages, 1)[0], True), (_widest_tables(pages, 1)[0], False)):
        page.visit(path)
        if open_diagram:
            _open_diagram(page, "keyboard")
        page.add_script_tag(path=str(ROOT / "node_modules" / "axe-core" / "axe.min.js"))
        bad = page.evaluate("""async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .filter(x => ['serious', 'critical'].includes(x.impact))
            .map(x => x.id + ': ' + x.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', '))""")
        assert not bad, f"/{path} at {width} px: {bad}"
