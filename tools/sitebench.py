"""What a reader and a contributor wait for: `python -m tools.sitebench` (`make bench-site`).

Prints one table: cold build time with every lab executed, cached rebuild after touching one page,
key-up to first search result in Chromium, bytes per page (median and max over every page, raw
and gzip-compressed as GitHub Pages serves them) and the search index size. It measures; it
asserts nothing (budgets are compared and reported, not enforced), so a noisy machine cannot
make it flaky.
"""
from __future__ import annotations

import functools
import gzip
import http.server
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
BUDGET = {"cached rebuild (s)": 15.0, "search: key-up to first result, median (ms)": 300.0,
          "page weight, gzip, median (KB)": 300.0}
QUERIES = ["量化", "共享内存", "FlashAttention", "ZeRO", "访存密集型", "张量并行", "红黑树", "向量加法",
           "PagedAttention", "syncthreads", "NCCL", "屋顶线模型"]


def _build(site: Path, cache: Path) -> float:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HANDBOOK_LABS_CACHE": str(cache), "LAB_FORCE_CPU": "1"}
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                   env=env, check=True, capture_output=True)
    return time.monotonic() - start


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _chromium():
    from playwright.sync_api import sync_playwright

    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("make bench-site needs Chromium (apt-get install chromium) for the search and page-weight figures")
    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu",
                                                             "--disable-background-networking", "--disable-quic"])
    return pw, browser


def _search_latencies(browser, base: str) -> list[float]:
    page = browser.new_page()
    page.goto(base)
    page.wait_for_load_state("networkidle")
    box = page.locator(".md-search__input")
    box.click()
    page.evaluate("""() => {
        const list = document.querySelector('.md-search-result__list');
        new MutationObserver(() => {
            if (window.__t0 && !window.__t1 && list.querySelector('.md-search-result__item'))
                window.__t1 = performance.now();
        }).observe(list, {childList: true, subtree: true});
    }""")
    box.fill("量化")  # warm-up: the first query also waits for the worker to load the index
    page.keyboard.press("End")
    page.wait_for_selector(".md-search-result__item", timeout=20_000)
    out = []
    for q in QUERIES:
        box.fill("")
        page.keyboard.press("End")
        page.wait_for_function("!document.querySelector('.md-search-result__item')")
        box.fill(q)
        page.evaluate("() => { window.__t1 = null; window.__t0 = performance.now(); }")
        page.keyboard.press("End")  # the key-up that makes Material search
        page.wait_for_function("window.__t1 !== null", timeout=20_000)
        out.append(page.evaluate("window.__t1 - window.__t0"))
    page.close()
    return out


def _page_weights(browser, base: str, site: Path) -> list[tuple[str, int, int]]:
    pages = sorted(p for p in site.rglob("index.html") if "assets" not in p.parts)
    host = urlparse(base).netloc
    weights = []
    for html in pages:
        path = html.parent.relative_to(site).as_posix()
        path = "" if path == "." else path + "/"
        context = browser.new_context()  # a cold cache for every page
        page = context.new_page()
        bodies: list[bytes] = []
        page.on("response", lambda r: bodies.append(r.body()) if urlparse(r.url).netloc == host and r.status == 200 else None)
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        raw = sum(len(b) for b in bodies)
        gz = sum(len(gzip.compress(b, compresslevel=6)) for b in bodies)
        weights.append((path or "(home)", raw, gz))
        context.close()
    return weights


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="sitebench-"))
    try:
        site, cache = tmp / "site", tmp / "labs-cache"
        cold = _build(site, cache)
        page = ROOT / "docs" / "operator" / "index.md"
        os.utime(page)
        cached = _build(site, cache)

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{httpd.server_port}/"
        pw, browser = _chromium()
        try:
            latencies = _search_latencies(browser, base)
            weights = _page_weights(browser, base, site)
        finally:
            browser.close()
            pw.stop()
            httpd.shutdown()
        index = (site / "search" / "search_index.json").read_bytes()

        raw = [w[1] for w in weights]
        gz = [w[2] for w in weights]
        heaviest = max(weights, key=lambda w: w[2])
        rows = [
            ("cold build, every lab executed (s)", f"{cold:.1f}"),
            ("cached rebuild (s)", f"{cached:.1f}"),
            ("search: key-up to first result, median (ms)", f"{statistics.median(latencies):.0f}"),
            ("search: key-up to first result, max (ms)", f"{max(latencies):.0f}"),
            ("page weight, raw, median (KB)", f"{statistics.median(raw) / 1000:.0f}"),
            ("page weight, raw, max (KB)", f"{max(raw) / 1000:.0f}"),
            ("page weight, gzip, median (KB)", f"{statistics.median(gz) / 1000:.0f}"),
            ("page weight, gzip, max (KB)", f"{max(gz) / 1000:.0f}  ({heaviest[0]})"),
            ("search index, raw / gzip (KB)", f"{len(index) / 1000:.0f} / {len(gzip.compress(index, 6)) / 1000:.0f}"),
        ]
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"{len(weights)} pages, {len(QUERIES)} queries")
        width = max(len(r[0]) for r in rows)
        print(f"{'figure':{width}s}  {'value':>14s}  budget")
        for name, value in rows:
            budget = BUDGET.get(name)
            verdict = ""
            if budget is not None:
                verdict = f"<= {budget:g}: " + ("within" if float(value.split()[0]) <= budget else "OVER")
            print(f"{name:{width}s}  {value:>14s}  {verdict}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
