"""The offline edition: `python -m tools.pdf [SITE]` (`make pdf`).

Builds the site with the one-page edition switched on (HANDBOOK_PRINT=true enables the print-site
plugin in mkdocs.yml), serves it on localhost, opens print_page/ in headless Chromium, waits until
every formula and diagram is rendered, checks the page, and prints it to SITE/handbook.pdf (the
deploy workflow publishes both). The checks, each naming what failed:
- every internal link of the one-page edition points at an element that exists in it;
- no formula is left as raw TeX, no diagram as source, and the page requested no other host.
"""
from __future__ import annotations

import functools
import http.server
import os
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
            page.pdf(path=str(pdf), format="A4", print_background=True, outline=True, tagged=True,
                     margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
            report["pdf_seconds"] = round(time.monotonic() - start, 1)
            report["console_errors"] = errors[:5]
            browser.close()
    finally:
        httpd.shutdown()
    return report


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else ROOT / "site"
    build(site)
    pdf = site / "handbook.pdf"
    report = check_and_print(site, pdf)
    print(f"one-page edition: {site / 'print_page' / 'index.html'}; PDF: {pdf} ({pdf.stat().st_size / 1e6:.1f} MB, "
          f"printed in {report['pdf_seconds']} s); {report['links']} internal links, all resolved; "
          f"{report['formulas']} formulas, {report['diagrams']} diagrams rendered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
