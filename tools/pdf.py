"""The offline edition: `python -m tools.pdf [SITE]` (`make pdf`).

Builds the site with the one-page edition switched on (HANDBOOK_PRINT=true enables the print-site
plugin in mkdocs.yml), serves it on localhost, opens print_page/ in headless Chromium, waits until
every formula and diagram is rendered, checks the page, and prints it to SITE/handbook.pdf (the
deploy workflow publishes both). The checks, each naming what failed:
- every internal link of the one-page edition points at an element that exists in it;
- no formula is left as raw TeX, no diagram as source, and the page requested no other host;
- every internal link of the joined PDF resolves to a destination in it.

Chromium holds a whole document's print layout in memory: printed in one piece, the edition of
116 pages and 51 labs grew past 14 GB and was still printing after 11 minutes on two cores, and
hiding the other chapters of the loaded page barely helped (hidden content still costs). So the
checked edition is cut into one HTML file per chapter beside it (same head, scripts and styles),
each file is printed on its own, and the parts are joined with pypdf. A link into another chapter
gets an empty hidden target in its file, so Chromium still writes it, as a named destination;
pypdf drops such links when it appends a part, so they are put back on the joined pages, where
every name resolves.
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
from urllib.parse import urlparse

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
                const links = [...document.querySelectorAll('#print-site-page a[href^="#"]:not(.glightbox)')];
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
            parts = _print_parts(browser, base, site)
            report.update(_join(parts, pdf))
            for path in parts:
                path.unlink()
                path.with_suffix(".html").unlink()
            report["pdf_seconds"] = round(time.monotonic() - start, 1)
            report["console_errors"] = errors[:5]
            browser.close()
    finally:
        httpd.shutdown()
    return report


_PAGE = re.compile(r'<section class="print-page" id="([^"]+)"')
_COVER = re.compile(r'<section id="print-site-cover-page">.*?</section>', re.S)
# print-site's table of contents printed as hundreds of pages of repeated entries (973 at 116
# pages); the PDF's outline (bookmarks, from the headings) is its table of contents instead
PRINT_CSS = "#print-page-toc { display: none !important; }"


def split_edition(html: str) -> list[str]:
    """The one-page edition cut into one document per chapter (pages grouped by the first part of
    their id: algorithm-transformer belongs to algorithm), in order; the cover stays in the first.
    Each document keeps the whole head and tail, and gets an empty hidden element for every id its
    links point to in other chapters, so that Chromium keeps those links."""
    starts = [(m.start(), m.group(1)) for m in _PAGE.finditer(html)]
    if not starts:
        raise SystemExit("the one-page edition has no pages (print-site's markup changed?)")
    closing = html.find("</article>", starts[-1][0])
    end = html.rfind("<style", starts[-1][0], closing)  # print-site's heading-number styles follow the last page
    end = end if end != -1 else closing
    head, tail = html[:starts[0][0]], html[end:]
    groups: list[list[tuple[int, int]]] = []
    chapter = None
    for i, (begin, page_id) in enumerate(starts):
        stop = starts[i + 1][0] if i + 1 < len(starts) else end
        if page_id.split("-")[0] != chapter:
            groups.append([])
            chapter = page_id.split("-")[0]
        groups[-1].append((begin, stop))
    linked = set(re.findall(r'href="#([^"]+)"', html))
    docs = []
    for k, group in enumerate(groups):
        body = "".join(html[b:e] for b, e in group)
        present = set(re.findall(r'\sid="([^"]+)"', body))
        # ids linked from other chapters: Chromium writes a destination only for an element that a
        # link of the same document points at, so each gets a hidden link here
        targets = "".join(f'<a href="#{t}"></a>' for t in sorted(present & linked))
        # links into other chapters: Chromium drops a link whose target is not in the document
        stubs = "".join(f'<span id="{t}"></span>' for t in sorted(set(re.findall(r'href="#([^"]+)"', body)) - present))
        doc_head = head if k == 0 else _COVER.sub("", head, count=1)
        docs.append(f'{doc_head}{body}<div hidden class="print-link-targets">{targets}{stubs}</div>{tail}')
    return docs


def _print_parts(browser, base: str, site: Path) -> list[Path]:
    """Print each chapter's document (written beside the edition, so its relative URLs hold)."""
    edition = site / "print_page" / "index.html"
    paths = []
    for k, doc in enumerate(split_edition(edition.read_text(encoding="utf-8"))):
        html = edition.with_name(f"part-{k:02d}.html")
        html.write_text(doc, encoding="utf-8")
        page = browser.new_page()
        page.goto(base + f"print_page/{html.name}", timeout=300_000, wait_until="load")
        page.wait_for_load_state("networkidle", timeout=300_000)
        page.emulate_media(media="print")
        page.add_style_tag(content=PRINT_CSS)
        path = html.with_suffix(".pdf")
        page.pdf(path=str(path), format="A4", print_background=True, outline=True, tagged=True,
                 margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
        page.close()
        paths.append(path)
    return paths


def _join(parts: list[Path], out: Path) -> dict:
    """Append the parts, put back the links pypdf dropped (their target is in another part), and
    check that every link of the joined PDF has a destination."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import ArrayObject, NameObject

    writer = PdfWriter()
    readers = [PdfReader(str(p)) for p in parts]
    offsets = []
    for reader in readers:
        offsets.append(len(writer.pages))
        writer.append(reader)
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
    with open(out, "wb") as f:
        writer.write(f)
    return {"parts": len(parts), "pdf_pages": len(writer.pages), "pdf_links": links, "pdf_links_restored": restored}


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
          f"{report['pdf_links_restored']} of them across parts); "
          f"{report['formulas']} formulas, {report['diagrams']} diagrams rendered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
