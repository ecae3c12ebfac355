"""The offline edition: `python -m tools.pdf [SITE]` (`make pdf`).

Builds the site with the one-page edition switched on (HANDBOOK_PRINT=true enables the print-site
plugin in mkdocs.yml), serves it on localhost, opens print_page/ in headless Chromium, waits until
every formula and diagram is rendered, checks the page, and prints it to SITE/handbook.pdf (the
deploy workflow publishes both). The checks, each naming what failed:
- every internal link of the one-page edition points at an element that exists in it;
- no formula is left as raw TeX, no diagram as source, and the page requested no other host;
- every internal link of the joined PDF resolves to a destination in it.

Chromium's print time grows much faster than the document it prints: the edition of 116 pages and
51 labs, printed in one piece, grew past 14 GB and was still printing after 11 minutes on two
cores, and one chapter of 3.9 MB printed in 94 s where its four quarters took 14 s together. So
the checked edition is cut into documents of whole pages, at most about 1 MB each and never across
two chapters, written beside it (same head, scripts and styles); each is printed on its own and
the parts are joined with pypdf. A link into another part gets an empty hidden target in its file,
so Chromium still writes it, as a named destination; pypdf drops such links when it appends a
part, so they are put back on the joined pages, where every name resolves. The footer's page
numbers go on from part to part, and the outline is rebuilt with the nav's sections at the top.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.diagrams import CHROMIUM_ARGS, chromium  # noqa: E402


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def build(site: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HANDBOOK_PRINT": "true"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit("the build of the one-page edition failed (see the messages above)")


def check_and_print(site: Path, pdf: Path) -> dict:
    from playwright.sync_api import sync_playwright

    exe = chromium()
    if exe is None:
        raise SystemExit("make pdf needs Chromium (apt-get install chromium, or set CHROMIUM=/path/to/chrome)")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_port}/"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
            page = browser.new_page()
            requests: list[str] = []
            errors: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(base + "print_page/", timeout=300_000, wait_until="load")
            page.wait_for_load_state("networkidle", timeout=300_000)
            page.emulate_media(media="print")
            report = page.evaluate("""() => {
                const ids = new Set([...document.querySelectorAll('[id]')].map(e => e.id));
                const links = [...document.querySelectorAll('#print-site-page a[href^="#"]')];
                const broken = links
                    .map(a => decodeURIComponent(a.getAttribute('href').slice(1)))
                    .filter(h => h && !ids.has(h));
                const raw = [...document.querySelectorAll('.arithmatex, .jupyter-wrapper .jp-MarkdownOutput')]
                    .filter(e => /\\\\\\(|\\\\\\[|\\$\\$/.test(e.innerText)).length;
                return {links: links.length,
                        broken: [...new Set(broken)].slice(0, 20),
                        formulas: document.querySelectorAll('.katex').length, raw,
                        diagrams: document.querySelectorAll('.mermaid-static svg').length,
                        unrendered: document.querySelectorAll('pre.mermaid').length};
            }""")
            foreign = sorted({u for u in requests if urlparse(u).netloc not in ("", urlparse(base).netloc)
                              and urlparse(u).scheme in ("http", "https")})
            problems = []
            if report["broken"]:
                problems.append(f"internal links to missing anchors: {report['broken']}")
            if report["raw"]:
                problems.append(f"{report['raw']} element(s) show raw TeX")
            if report["unrendered"]:
                problems.append(f"{report['unrendered']} diagram(s) left as source")
            if foreign:
                problems.append(f"requests to other hosts: {foreign[:5]}")
            if problems:
                raise SystemExit("the one-page edition is not ready to print:\n  " + "\n  ".join(problems) +
                                 "\n  fix: correct the page the anchor or formula comes from, then run `make pdf` again")
            start = time.monotonic()
            page.close()
            edition = (site / "print_page" / "index.html").read_text(encoding="utf-8")
            parts = _print_parts(browser, base, site, edition)
            report.update(_join(parts, pdf, edition_outline(edition)))
            report["pdf_seconds"] = round(time.monotonic() - start, 1)
            report["console_errors"] = errors[:5]
            browser.close()
    finally:
        httpd.shutdown()
        # the parts are working files: none is left in the site, whether printing ended or failed
        for leftover in (site / "print_page").glob("part-*.*"):
            leftover.unlink()
    return report


_PAGE = re.compile(r'<section class="print-page" id="([^"]+)"')
_COVER = re.compile(r'<section id="print-site-cover-page">.*?</section>', re.S)
# print-site's table of contents printed as hundreds of pages of repeated entries (973 at 116
# pages); the PDF's outline (bookmarks, from the headings) is its table of contents instead. The
# setup cell every lab shares (mkdocs-jupyter nests a cell's div in one that carries its tags) is
# printed in the first lab only. print-site keeps every <pre> on one page; a lab's code cell longer
# than what is left of a page then left an empty page before it (3 in the book of 1892 pages)
PRINT_CSS = """
.jupyter-wrapper pre { break-inside: auto !important; }
#print-site-page > section.print-page:has(> #print-page-toc) { display: none !important; }
.jp-Cell.celltag_setup:not(.print-keep) .jp-InputArea { display: none !important; }
:not(.celltag_setup) > .jp-Cell.celltag_setup:not(.print-keep)::before {
  content: "（实验环境准备单元格与本书第一个实验中的相同，由 tools/lab_setup.py 生成，此处从略。）";
  display: block; font-size: .8em; color: #666; margin: .5em 0;
}
"""
# print-site's CSS breaks the page before every page section but the first of the edition; in a
# later part the first page section follows the hidden table of contents, and its break printed
# as an empty first page
CONTINUED_CSS = "#print-site-page > section.print-page:has(> #print-page-toc) + section.print-page { break-before: avoid !important; }"
# Chromium's print time grows much faster than the document: on 2 cores the framework chapter
# (24 pages, 3.9 MB of page HTML) printed in 94 s in one piece, in 29 s as two halves and in 14 s
# as four parts of about 1 MB; a page alone prints in under a second
PART_BYTES = 1_000_000


def split_edition(html: str, max_bytes: int = PART_BYTES) -> list[str]:
    """The one-page edition cut into documents of whole pages, in order: a document never spans two
    chapters (pages are grouped by the first part of their id: algorithm-transformer belongs to
    algorithm) and holds at most max_bytes of page HTML (a larger page is a document of its own);
    the cover stays in the first. Each document keeps the whole head and tail, an empty hidden
    element for every id its links point to in other documents (so that Chromium keeps those links),
    and a hidden link to every id another document links to and every heading of the outline (so
    that Chromium writes their destinations)."""
    starts = [(m.start(), m.group(1)) for m in _PAGE.finditer(html)]
    if not starts:
        raise SystemExit("the one-page edition has no pages (print-site's markup changed?)")
    closing = html.find("</article>", starts[-1][0])
    end = html.rfind("<style", starts[-1][0], closing)  # print-site's heading-number styles follow the last page
    end = end if end != -1 else closing
    # a nav section's title (print-site wraps the section's pages in it) before the first page
    # belongs to the first document, not to the head every document repeats
    section = _SECTION.search(html, 0, starts[0][0])
    if section:
        starts[0] = (section.start(), starts[0][1])
    head, tail = html[:starts[0][0]], html[end:]
    groups: list[list[tuple[int, int]]] = []
    chapter, size = None, 0
    for i, (begin, page_id) in enumerate(starts):
        stop = starts[i + 1][0] if i + 1 < len(starts) else end
        if page_id.split("-")[0] != chapter or size + stop - begin > max_bytes:
            groups.append([])
            chapter, size = page_id.split("-")[0], 0
        groups[-1].append((begin, stop))
        size += stop - begin
    linked = set(re.findall(r'href="#([^"]+)"', html))
    docs = []
    for k, group in enumerate(groups):
        body = "".join(html[b:e] for b, e in group)
        present = set(re.findall(r'\sid="([^"]+)"', body))
        # Chromium writes a destination only for an element that a link of the same document points
        # at: the ids linked from other documents, and every heading of the outline, get a hidden link
        outlined = {m.group(2) for m in _HEADING.finditer(body)} | {m.group(1) for m in _SECTION.finditer(body)}
        targets = "".join(f'<a href="#{t}"></a>' for t in sorted((present & linked) | outlined))
        # links into other chapters: Chromium drops a link whose target is not in the document
        stubs = "".join(f'<span id="{t}"></span>' for t in sorted(set(re.findall(r'href="#([^"]+)"', body)) - present))
        doc_head = head if k == 0 else _COVER.sub("", head, count=1)
        docs.append(f'{doc_head}{body}<div hidden class="print-link-targets">{targets}{stubs}</div>{tail}')
    return docs


def _print_parts(browser, base: str, site: Path, text: str) -> list[Path]:
    """Print each document of the edition (written beside it, so its relative URLs hold)."""
    from pypdf import PdfReader

    edition = site / "print_page" / "index.html"
    paths: list[Path] = []
    printed, setup_shown = 0, False
    for k, doc in enumerate(split_edition(text)):
        html = edition.with_name(f"part-{k:02d}.html")
        html.write_text(doc, encoding="utf-8")
        page = browser.new_page()
        page.goto(base + f"print_page/{html.name}", timeout=300_000, wait_until="load")
        page.wait_for_load_state("networkidle", timeout=300_000)
        page.emulate_media(media="print")
        # the page numbers in the footer (print-site's @page rule) go on from the previous parts
        page.add_style_tag(content=PRINT_CSS + (CONTINUED_CSS if k else "") + f"html {{ counter-reset: page {printed}; }}")
        if not setup_shown:  # the shared setup cell is printed once, in the first lab
            setup_shown = page.evaluate("""() => { const c = document.querySelector('.jp-Cell.celltag_setup');
                if (c) [c, ...c.querySelectorAll('.celltag_setup')].forEach(e => e.classList.add('print-keep'));
                return !!c; }""")
        path = html.with_suffix(".pdf")
        page.pdf(path=str(path), format="A4", print_background=True, outline=False, tagged=False,
                 margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
        page.close()
        printed += len(PdfReader(str(path)).pages)
        paths.append(path)
    return paths


def _join(parts: list[Path], out: Path, outline: list[tuple[int, str, str]] = ()) -> dict:
    """Append the parts, put back the links pypdf dropped (their target is in another part), check
    that every link of the joined PDF has a destination, and build the outline (see _outline)."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import ArrayObject, NameObject

    writer = PdfWriter()
    readers = [PdfReader(str(p)) for p in parts]
    offsets = []
    for reader in readers:
        offsets.append(len(writer.pages))
        writer.append(reader, import_outline=False)
    restored = 0
    for reader, offset in zip(readers, offsets):
        for i, src in enumerate(reader.pages):
            kept = {_link_key(a.get_object()) for a in writer.pages[offset + i].get("/Annots") or []}
            for annot in src.get("/Annots") or []:
                link = annot.get_object()
                if link.get("/Subtype") != "/Link" or "/Dest" not in link or _link_key(link) in kept:
                    continue
                copy = writer._add_object(link.clone(writer, ignore_fields=("/P", "/Parent")))
                target = writer.pages[offset + i]
                if "/Annots" not in target:
                    target[NameObject("/Annots")] = ArrayObject()
                target["/Annots"].get_object().append(copy)
                restored += 1
    names = set(writer.named_destinations)
    links, dangling = 0, set()
    for pg in writer.pages:
        for annot in pg.get("/Annots") or []:
            link = annot.get_object()
            dest = link.get("/Dest")
            if link.get("/Subtype") == "/Link" and isinstance(dest, str):
                links += 1
                if dest not in names:
                    dangling.add(dest)
    if dangling:
        raise SystemExit(f"the joined PDF has {len(dangling)} link target(s) with no destination, e.g. "
                         f"{sorted(dangling)[:5]}\n  fix: correct the page the anchor comes from, then run `make pdf` again")
    entries = _outline(writer, list(outline))
    writer.page_mode = "/UseOutlines"
    # every part carries its own copy of the glyphs it uses (Chromium writes the CJK font, whose
    # outlines are CFF, as Type 3 glyph procedures): identical objects are kept once, which took
    # the joined book of 1892 pages from 87 MB to 56 MB
    writer.compress_identical_objects(remove_duplicates=True, remove_unreferenced=True)
    with open(out, "wb") as f:
        writer.write(f)
    return {"parts": len(parts), "pdf_pages": len(writer.pages), "pdf_links": links, "pdf_links_restored": restored,
            "pdf_outline": entries}


_SECTION = re.compile(r"<section class='print-page md-section' id='([^']*)' heading-number='([0-9.]+)'>\s*<h1>(.*?)</h1>", re.S)
_HEADING = re.compile(r'<h([123])\s[^>]*?id="([^"]+)"[^>]*>(.*?)</h\1>', re.S)


def _heading_text(inner: str) -> str:
    """A heading's text as a reader sees it: no permalink mark, a formula as its TeX."""
    from lxml import html as lxml_html

    node = lxml_html.fragment_fromstring(inner, create_parent="div")
    for link in node.xpath('.//a[contains(@class, "headerlink") or contains(@class, "anchor-link")]'):
        link.drop_tree()
    for math in node.xpath('.//span[contains(concat(" ", @class, " "), " katex ")]'):
        tex = math.xpath('.//annotation[@encoding="application/x-tex"]/text()')
        math.drop_tree() if not tex else (math.clear(), setattr(math, "text", tex[0]))
    return " ".join(node.text_content().split())


def edition_outline(html: str) -> list[tuple[int, str, str]]:
    """The PDF's outline, read from the one-page edition: (level, title, id of the target) in order.
    print-site gives each nav section a title page (heading-number 3 is a chapter, 10.2 a section
    of chapter 10) and wraps the section's pages in it: a page's h1 goes one level under its
    section, h2 and h3 under the h1. A chapter's overview page bears its section's title: its h1
    is left out and its h2 and h3 go straight under the section."""
    events = [(m.start(), "section", m) for m in _SECTION.finditer(html)]
    events += [(m.start(), "heading", m) for m in _HEADING.finditer(html)]
    items, depth, section_title, overview = [], 0, None, False
    for _, kind, m in sorted(events, key=lambda e: e[0]):
        if kind == "section":
            depth, section_title = m.group(2).count(".") + 1, _heading_text(m.group(3))
            items.append((depth, section_title, m.group(1)))
            continue
        level, title = int(m.group(1)), _heading_text(m.group(3))
        if level == 1:
            overview = title == section_title and items[-1][2].startswith("section-")
            if overview:
                continue
        items.append((depth + level - (1 if overview else 0), title, m.group(2)))
    return items


# Chromium names a destination by its id written as a URL fragment: UTF-8 percent-encoded, and so
# are the space, ", <, > and ` (the WHATWG fragment percent-encode set); other ASCII stays
_FRAGMENT_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in '"<>`')


def _dest_name(target: str) -> str:
    return "/" + quote(target, safe=_FRAGMENT_SAFE)


def _outline(writer, outline: list[tuple[int, str, str]]) -> int:
    """Write the outline; every entry points at the named destination of its heading (each has
    one: split_edition gives every heading a hidden link). Returns the number of entries."""
    from pypdf.generic import Fit

    names = writer.named_destinations
    number = {page.indirect_reference.idnum: i for i, page in enumerate(writer.pages)}
    missing = [target for _, _, target in outline if _dest_name(target) not in names]
    if missing:
        raise SystemExit(f"the PDF has no destination for {len(missing)} heading(s), e.g. {missing[:5]}\n"
                         "  fix: give the heading an id (a Markdown heading always has one), then run `make pdf` again")
    stack: list[tuple[int, object]] = []
    for level, title, target in outline:
        dest = names[_dest_name(target)]
        while stack and stack[-1][0] >= level:
            stack.pop()
        page = dest.page if hasattr(dest.page, "idnum") else dest.page.indirect_reference
        node = writer.add_outline_item(title=title, page_number=number[page.idnum], parent=stack[-1][1] if stack else None,
                                       fit=Fit.xyz(dest.left, dest.top), is_open=len(stack) == 0)
        stack.append((level, node))
    return len(outline)


def _link_key(link) -> tuple:
    return (str(link.get("/Dest")), tuple(round(float(v), 1) for v in link.get("/Rect", [])))


def main(argv: list[str]) -> int:
    """`python -m tools.pdf [--print-only] [SITE]`: --print-only prints a site already built with
    HANDBOOK_PRINT=true (the deploy workflow builds and publishes the site first, then prints)."""
    print_only = "--print-only" in argv
    args = [a for a in argv if a != "--print-only"]
    site = Path(args[0]) if args else ROOT / "site"
    if not print_only:
        build(site)
    elif not (site / "print_page" / "index.html").exists():
        raise SystemExit(f"{site}/print_page/ is missing: build with HANDBOOK_PRINT=true first (or drop --print-only)")
    pdf = site / "handbook.pdf"
    report = check_and_print(site, pdf)
    print(f"one-page edition: {site / 'print_page' / 'index.html'}; PDF: {pdf} ({pdf.stat().st_size / 1e6:.1f} MB, "
          f"{report['pdf_pages']} pages printed in {report['parts']} parts in {report['pdf_seconds']} s); "
          f"{report['links']} internal links, all resolved ({report['pdf_links']} in the PDF, "
          f"{report['pdf_links_restored']} of them across parts); {report['pdf_outline']} bookmarks; "
          f"{report['formulas']} formulas, {report['diagrams']} diagrams rendered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
