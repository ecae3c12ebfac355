"""The offline edition: `python -m tools.pdf [SITE]` (`make pdf`).

Builds the site with the one-page edition switched on (HANDBOOK_PRINT=true enables the print-site
plugin in mkdocs.yml), serves it on localhost, opens print_page/ in headless Chromium, waits until
every formula and diagram is rendered, checks the page, and prints it to SITE/handbook.pdf (the
deploy workflow publishes both). The checks, each naming what failed:
- every internal link of the one-page edition points at an element that exists in it;
- no formula is left as raw TeX, no diagram as source, and the page requested no other host;
- every internal link of the joined PDF resolves to a destination in it.

Chromium holds a whole document's print layout in memory: printed in one piece, the edition of
116 pages and 51 labs grew past 14 GB and was still printing after 11 minutes on two cores. So it
is printed chapter by chapter from the one loaded page (the other chapters hidden, which takes
them out of layout) and the parts are joined with pypdf. Chromium writes links as named
destinations even when the target is in another part; pypdf drops such links when it appends a
part, so they are put back on the joined pages, where every name resolves.
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
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
            parts = _print_by_chapter(page, pdf.parent / "print-parts")
            report.update(_join(parts, pdf))
            shutil.rmtree(pdf.parent / "print-parts", ignore_errors=True)
            report["pdf_seconds"] = round(time.monotonic() - start, 1)
            report["console_errors"] = errors[:5]
            browser.close()
    finally:
        httpd.shutdown()
    return report


_MARK_CHAPTERS = """() => {
    // top-level pages of the edition, grouped by chapter (the first part of the page id:
    // algorithm-transformer belongs to algorithm); each group is printed as one part
    const pages = [...document.querySelectorAll('#print-site-page section.print-page')]
        .filter(s => !s.parentElement.closest('section.print-page'));
    let part = -1, chapter = null;
    for (const s of pages) {
        const c = s.id.split('-')[0];
        if (c !== chapter) { part += 1; chapter = c; }
        s.dataset.printPart = String(part);
    }
    return part + 1;
}"""


def _print_by_chapter(page, folder: Path) -> list[Path]:
    """One PDF per chapter, in order; the cover goes with the first."""
    folder.mkdir(parents=True, exist_ok=True)
    n = page.evaluate(_MARK_CHAPTERS)
    style = page.add_style_tag(content="/* the part being printed */")
    paths = []
    for k in range(n):
        # print-site's table of contents printed as hundreds of pages of repeated entries (973 at 116
        # pages); the PDF's outline (bookmarks, from the headings) is its table of contents instead
        css = (f'section.print-page[data-print-part]:not([data-print-part="{k}"]) {{ display: none !important; }}'
               " #print-page-toc { display: none !important; }")
        if k:
            css += " #print-site-cover-page { display: none !important; }"
        style.evaluate("(el, css) => { el.textContent = css; }", css)
        path = folder / f"part-{k:02d}.pdf"
        page.pdf(path=str(path), format="A4", print_background=True, outline=True, tagged=True,
                 margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
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
    site = Path(argv[0]) if argv else ROOT / "site"
    build(site)
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
