"""Shared fixtures: one strict build of the real site per test session, and a local HTTP server for it."""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Tests run Triton kernels in its CPU interpreter. The switch must be on before anything imports
# triton: the standard library's helpers (tl.zeros, ...) are made interpreted or compiled once, at
# import, and a kernel interpreted later cannot call a compiled helper.
os.environ.setdefault("TRITON_INTERPRET", "1")
MKDOCS = [sys.executable, "-m", "mkdocs"]
# The test build runs the labs in CPU mode (as CI has no GPU) and the lab tests read that build's
# executions instead of running every lab a second time.
BUILD_ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "LAB_FORCE_CPU": "1"}


def load_listing(path: Path, module_name: str):
    """Import a listing from its path (listings have kebab-case file names), once per test session."""
    import importlib.util

    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class Build:
    def __init__(self, site: Path, proc: subprocess.CompletedProcess):
        self.site = site
        self.returncode = proc.returncode
        self.log = proc.stdout + proc.stderr

    def warnings(self) -> list[str]:
        return [line for line in self.log.splitlines() if line.startswith(("WARNING", "ERROR"))]


def build(config: Path, site: Path, *, strict: bool, env: dict | None = None) -> Build:
    cmd = [*MKDOCS, "build", "--config-file", str(config), "--site-dir", str(site)]
    if strict:
        cmd.append("--strict")
    proc = subprocess.run(cmd, cwd=config.parent, capture_output=True, text=True,
                          env={**BUILD_ENV, **(env or {})}, timeout=1800)
    return Build(site, proc)


@pytest.fixture(scope="session")
def site_build(tmp_path_factory) -> Build:
    """The real site, built once with --strict (labs executed, through their cache)."""
    return build(ROOT / "mkdocs.yml", tmp_path_factory.mktemp("site"), strict=True)


@pytest.fixture(scope="session")
def site(site_build) -> Path:
    assert site_build.returncode == 0, "the strict build failed:\n" + "\n".join(site_build.warnings() or [site_build.log[-3000:]])
    return site_build.site


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server(site) -> str:
    """The built site on http://127.0.0.1:<free port>/ (stopped at the end of the session)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()
    thread.join(timeout=10)


@pytest.fixture()
def project_copy(tmp_path) -> Path:
    """A throwaway copy of the project's site sources, for builds with deliberately bad input."""
    dst = tmp_path / "project"
    dst.mkdir()
    for name in ("docs", "notebooks", "overrides", "tools", "data", "code"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("mkdocs.yml", ".autocorrectrc", "requirements.txt"):
        shutil.copy2(ROOT / name, dst / name)
    (dst / "node_modules").symlink_to(ROOT / "node_modules")
    # Diagrams, math, converted notebooks and search entries are cached by their full content, so
    # the copies share the project's caches: a copy then renders only what its bad input changed.
    (dst / ".cache").mkdir()
    for name in ("diagrams", "math", "build"):
        (ROOT / ".cache" / name).mkdir(parents=True, exist_ok=True)
        (dst / ".cache" / name).symlink_to(ROOT / ".cache" / name)
    return dst


# ---- the browser tests' shared pieces: Debian's Chromium driven by Playwright ----
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = ("no Chromium: install Debian's chromium (`apt-get install chromium`; .ci/run does it) "
               "or set CHROMIUM=/path/to/chrome")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")
def browser():
    """One Chromium per test module (each test opens its own context). Not per session: Playwright's sync API
    runs an asyncio loop while it is started, so a later test's asyncio.run() or a second sync_playwright()
    (the diagram renderer, the PDF tests) would fail with 'Sync API inside the asyncio loop'."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Visit:
    """A page plus everything it requested and every console error it logged."""

    def __init__(self, browser, base, path, **context):
        self.context = browser.new_context(**context)
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.base = base
        self.page.goto(base + path)
        self.page.wait_for_load_state("networkidle")

    def foreign(self) -> list[str]:
        from urllib.parse import urlparse

        host = urlparse(self.base).netloc
        return [u for u in self.requests if urlparse(u).scheme in ("http", "https", "ws", "wss") and urlparse(u).netloc != host]

    def close(self):
        self.context.close()


@pytest.fixture()
def visit(browser, server):
    """visit(path, **context) opens a page of the built site in a fresh browser context (closed after the test)."""
    opened = []

    def _visit(path="", **context):
        v = Visit(browser, server, path, **context)
        opened.append(v)
        return v

    yield _visit
    for v in opened:
        v.close()
