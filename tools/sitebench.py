"""What a reader and a contributor wait for: `python -m tools.sitebench [--scale]` (`make bench-site`,
`make bench-site SCALE=1` for a generated 200-page, 60-lab copy made by tools/scale.py).

Prints one table: `make serve` to first page in a fresh clone, cold build time with every lab
executed, cached rebuild after a one-page edit, search-index requests before search is used, the
first query's wait and key-up to first search result in Chromium, bytes per page (median and max
over every page, raw and gzip-compressed as GitHub Pages serves them), the search index size, and the
smallest label of any diagram as rendered at a 1440 px desktop and a 390 px phone (tools/reader.py).
Build and preview figures come with the CPU seconds their processes used (psutil, which ipykernel
brings, for the preview's process tree): on a shared or loaded machine the wall time grows with the
load while the CPU time hardly does, so the pair tells a slow design from a busy machine. It measures; it
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
BUDGET = {"preview: make serve to first page, fresh clone (s)": 60.0, "cached rebuild after a one-page edit (s)": 15.0,
          "search index requests before search is used": 0, "search: key-up to first result, median (ms)": 300.0,
          "search: key-up to first result, max (ms)": 300.0, "page weight, gzip, median (KB)": 300.0,
          "search: after a link to a second page, key-up to first result (ms)": 300.0}
# figures where more is better: (name, the least acceptable value)
FLOOR = {"diagrams: smallest label at 1440 px (px)": 11.0, "diagrams: smallest label at 390 px (px)": 11.0}
QUERIES = ["量化", "共享内存", "FlashAttention", "ZeRO", "访存密集型", "张量并行", "红黑树", "向量加法",
           "PagedAttention", "syncthreads", "NCCL", "屋顶线模型"]


def _env(**extra) -> dict:
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1", "LAB_FORCE_CPU": "1", **extra}


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process and all its descendants (and the children they reaped)."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def _build(project: Path, site: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (every process the build ran) of one strict build."""
    start, cpu0 = time.monotonic(), _children_cpu()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=project,
                          env=_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the strict build of {project} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return time.monotonic() - start, _children_cpu() - cpu0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _preview_first_page(project: Path) -> tuple[float, float]:
    """`make serve` in a fresh clone: no cache of any kind; wall seconds until the home page is served, and the
    CPU seconds the server's process tree had used by then (labs executing in the background included)."""
    import signal
    import urllib.request

    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "--dev-addr", f"127.0.0.1:{port}", "--no-livereload"],
                            cwd=project, env=_env(LABS_EXECUTE="background", SITE_URL=url, HANDBOOK_GIT_DATES="false"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while time.monotonic() - start < 600:
            if proc.poll() is not None:
                raise SystemExit(f"mkdocs serve exited with {proc.returncode} before serving a page")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - start, _tree_cpu(proc.pid)
            except OSError:
                time.sleep(0.25)
        raise SystemExit("mkdocs serve served nothing within 600 s")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the lab kernels it started, by its own group id
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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


def _search_latencies(browser, base: str) -> tuple[int, float, list[float]]:
    """(index requests before search is used, focus-to-first-result of the first query, key-up latencies)."""
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(base)
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(500)
    early = sum("search_index" in u for u in requests)
    box = page.locator(".md-search__input")
    page.evaluate("""() => {
        const list = document.querySelector('.md-search-result__list');
        new MutationObserver(() => {
            if (window.__t0 && !window.__t1 && list.querySelector('.md-search-result__item'))
                window.__t1 = performance.now();
        }).observe(list, {childList: true, subtree: true});
    }""")
    # First use: focus (the index is requested now), type a query and release a key at once: the
    # reader waits for the index to arrive and be indexed by the worker.
    page.evaluate("() => { window.__t1 = null; window.__t0 = performance.now(); }")
    box.click()
    box.fill("量化")
    page.keyboard.press("End")
    page.wait_for_function("window.__t1 !== null", timeout=60_000)
    first = page.evaluate("window.__t1 - window.__t0")
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
    return early, first, out


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


def main(argv: list[str] | None = None) -> int:
    import argparse

    from tools import reader, scale, searchbench

    parser = argparse.ArgumentParser(description="build, rebuild, preview, search and page-weight figures")
    parser.add_argument("--scale", action="store_true", help="measure a generated copy with --pages pages and --labs labs")
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--labs", type=int, default=60)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="sitebench-"))
    try:
        # Every figure is taken on a copy, so the repository and its caches are never touched and
        # every "cold" figure really starts from nothing.
        pages, labs_n = (args.pages, args.labs) if args.scale else (0, 0)
        project = tmp / "project"
        info = scale.make(project, pages, labs_n)
        preview_copy = tmp / "preview"
        shutil.copytree(project, preview_copy, symlinks=True)
        load_start = os.getloadavg()[0]
        preview, preview_cpu = _preview_first_page(preview_copy)
        site = tmp / "site"
        cold, cold_cpu = _build(project, site)
        page = project / "docs" / "operator" / "index.md"
        page.write_text(page.read_text(encoding="utf-8") + "\n一处编辑：基准测试在页尾加的一句话。\n", encoding="utf-8")
        cached, cached_cpu = _build(project, site)
        load_end = os.getloadavg()[0]

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{httpd.server_port}/"
        pw, browser = _chromium()
        try:
            early, first, latencies = _search_latencies(browser, base)
            # search on one page, follow a link, search again: the index is built once per visit (tools/searchbench.py)
            visit = searchbench.ready_after_navigation(browser, base)
            weights = _page_weights(browser, base, site)
            labels = reader.diagram_label_figures(browser, base, site)  # every diagram at both widths
        finally:
            browser.close()
            pw.stop()
            httpd.shutdown()
        index = (site / "search" / "search_index.json").read_bytes()

        raw = [w[1] for w in weights]
        gz = [w[2] for w in weights]
        heaviest = max(weights, key=lambda w: w[2])
        rows = [
            ("preview: make serve to first page, fresh clone (s)", f"{preview:.1f}"),
            ("  CPU time used by then (s)", f"{preview_cpu:.1f}"),
            ("cold build, every lab executed (s)", f"{cold:.1f}"),
            ("  CPU time (s)", f"{cold_cpu:.1f}"),
            ("cached rebuild after a one-page edit (s)", f"{cached:.1f}"),
            ("  CPU time (s)", f"{cached_cpu:.1f}"),
            ("search index requests before search is used", f"{early}"),
            ("search: first query, focus to first result (ms)", f"{first:.0f}"),
            ("search: key-up to first result, median (ms)", f"{statistics.median(latencies):.0f}"),
            ("search: key-up to first result, max (ms)", f"{max(latencies):.0f}"),
            ("search: after a link to a second page, key-up to first result (ms)",
             f"{visit['after navigation (ms)']:.0f}" + ("" if visit["same document"] else "  (page reloaded)")),
            *[(f"diagrams: smallest label at {w} px (px)",
               f"{labels[w]['min']:.1f}  ({labels[w]['where']}; {labels[w]['under_11']} of {labels[w]['diagrams']} under 11 px)"
               if labels[w]["min"] is not None else "no diagrams") for w in (1440, 390)],
            ("page weight, raw, median (KB)", f"{statistics.median(raw) / 1000:.0f}"),
            ("page weight, raw, max (KB)", f"{max(raw) / 1000:.0f}"),
            ("page weight, gzip, median (KB)", f"{statistics.median(gz) / 1000:.0f}"),
            ("page weight, gzip, max (KB)", f"{max(gz) / 1000:.0f}  ({heaviest[0]})"),
            ("search index, raw / gzip (KB)", f"{len(index) / 1000:.0f} / {len(gzip.compress(index, 6)) / 1000:.0f}"),
        ]
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"{'scale copy' if args.scale else 'the site'}: {info['pages']} Markdown pages + {info['labs']} labs, "
              f"{len(weights)} HTML pages measured, {len(QUERIES)} queries; 1-minute load average "
              f"{load_start:.1f} before the builds, {load_end:.1f} after (wall times grow with load; CPU times hardly do)")
        width = max(len(r[0]) for r in rows)
        print(f"{'figure':{width}s}  {'value':>14s}  budget")
        for name, value in rows:
            budget = BUDGET.get(name)
            verdict = ""
            if budget is not None:
                verdict = f"<= {budget:g}: " + ("within" if float(value.split()[0]) <= budget else "OVER")
            elif name in FLOOR and value[:1].isdigit():
                verdict = f">= {FLOOR[name]:g}: " + ("within" if float(value.split()[0]) >= FLOOR[name] else "UNDER")
            print(f"{name:{width}s}  {value:>14s}  {verdict}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
