"""Mermaid diagrams rendered to inline SVG at build time, so a page with a diagram loads no script.

Material renders each ```mermaid fence in the reader's browser with Mermaid (about 300 KB gzip of
ES-module chunks for one flowchart). Here the same Mermaid version (node_modules, pinned in
package-lock.json) renders each diagram once, in headless Chromium driven by Playwright, with the
theme stylesheet Material itself passes to Mermaid. That stylesheet colours every node, edge and
label with Material's CSS custom properties (--md-mermaid-*), which the palette defines for the
light and the dark scheme, so one inline SVG is legible in both.

The SVGs are cached under .cache/diagrams/ by a hash of the diagram's source, the Mermaid version
and the theme stylesheet: a rebuild renders only new or changed diagrams and starts no browser.
Without Chromium (or with HANDBOOK_DIAGRAMS=client) the build keeps the fences and the page loads
the self-hosted Mermaid instead, as before; nothing is lost, the page is only heavier.
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("HANDBOOK_DIAGRAMS_CACHE") or ROOT / ".cache" / "diagrams")
MERMAID_DIST = ROOT / "node_modules" / "mermaid" / "dist"
FENCE = re.compile(r'<pre class="mermaid"><code>(.*?)</code></pre>', re.S)
ORIGIN = "http://diagrams.invalid/"  # answered by page.route below: no request leaves the browser
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


class DiagramError(RuntimeError):
    pass


def chromium() -> str | None:
    if os.environ.get("HANDBOOK_DIAGRAMS", "svg") == "client":
        return None
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def theme_css() -> str:
    """Material's Mermaid stylesheet, read from the source map its package ships."""
    import material

    assets = Path(material.__file__).parent / "templates" / "assets" / "javascripts"
    maps = sorted(assets.glob("bundle.*.min.js.map"))
    if len(maps) == 1:
        data = json.loads(maps[0].read_text(encoding="utf-8"))
        for src, content in zip(data["sources"], data.get("sourcesContent") or []):
            if src.endswith("components/content/mermaid/index.css") and content:
                return content
    raise DiagramError("could not find Material's Mermaid stylesheet in its bundle's source map "
                       "(fix: re-check tools/diagrams.py theme_css() after a Material upgrade, or build with "
                       "HANDBOOK_DIAGRAMS=client to render diagrams in the browser)")


def _version() -> str:
    return json.loads((MERMAID_DIST.parent / "package.json").read_text(encoding="utf-8"))["version"]


def _label(svg: str) -> str:
    """An accessible name for a diagram: 示意图 followed by the first labels it shows."""
    texts = re.findall(r'<(?:span|p)[^>]*class="[^"]*(?:nodeLabel|edgeLabel)[^"]*"[^>]*>(.*?)</(?:span|p)>', svg, re.S)
    if not texts:
        texts = re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S)
    words = []
    for t in texts:
        t = re.sub(r"<[^>]+>", " ", t)
        t = " ".join(html.unescape(t).split())
        if t and t not in words:
            words.append(t)
    label = "、".join(words)
    return "示意图：" + (label[:160] + "…" if len(label) > 160 else label) if label else "示意图"


class Renderer:
    """One headless Chromium for the whole build, started at the first diagram missing from the cache."""

    def __init__(self):
        self.exe = chromium()
        self._css = None
        self._salt = None
        self._pw = self._browser = self._page = None
        self.rendered = 0

    @property
    def enabled(self) -> bool:
        return self.exe is not None

    def salt(self) -> str:
        if self._salt is None:
            self._css = theme_css()
            self._salt = hashlib.sha256(f"{_version()}\n{self._css}".encode()).hexdigest()[:16]
        return self._salt

    def _start(self):
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=self.exe, args=CHROMIUM_ARGS)
        self._page = self._browser.new_page()

        dist = MERMAID_DIST.resolve()  # node_modules may be a link (project copies, worktrees)

        def serve(route):
            name = route.request.url.removeprefix(ORIGIN)
            path = (dist / name).resolve()
            if name == "":
                route.fulfill(content_type="text/html", body="<!doctype html><meta charset=utf-8><body></body>")
            elif path.is_file() and path.is_relative_to(dist):
                route.fulfill(path=str(path), content_type="text/javascript")
            else:
                route.fulfill(status=404, body="")

        self._page.route("**/*", serve)
        self._page.goto(ORIGIN)
        # Mermaid measures label text while it lays out the graph: use the site's font stack.
        fonts = re.search(r"--md-text-font:\s*([^;]+);",
                          (ROOT / "docs" / "assets" / "stylesheets" / "extra.css").read_text(encoding="utf-8"))
        self._page.add_style_tag(content=":root{--md-mermaid-font-family:%s}body{font-family:var(--md-mermaid-font-family)}"
                                 % (fonts.group(1) if fonts else "sans-serif"))
        self._page.add_script_tag(type="module", content="""
            import mermaid from "./mermaid.esm.min.mjs";
            window.__renderDiagram = async (id, text, themeCSS) => {
                mermaid.initialize({startOnLoad: false, themeCSS, fontFamily: "var(--md-mermaid-font-family)",
                                    sequence: {actorFontSize: "16px", messageFontSize: "16px", noteFontSize: "16px"}});
                return (await mermaid.render(id, text)).svg;
            };""")
        errors: list[str] = []
        self._page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            self._page.wait_for_function("typeof window.__renderDiagram === 'function'", timeout=60_000)
        except Exception:
            raise DiagramError(f"Mermaid did not load in Chromium from {dist} ({'; '.join(errors) or 'no error reported'}) "
                               "(fix: run `npm ci` so node_modules/mermaid exists, or build with "
                               "HANDBOOK_DIAGRAMS=client)") from None

    def svg(self, text: str, where: str) -> str:
        key = hashlib.sha256(f"{self.salt()}\n{text}".encode()).hexdigest()[:20]
        cached = CACHE / f"{key}.svg"
        if cached.exists():
            return cached.read_text(encoding="utf-8")
        if self._page is None:
            self._start()
        try:
            svg = self._page.evaluate("([id, text, css]) => window.__renderDiagram(id, text, css)",
                                      [f"mermaid-{key}", text, self._css])
        except Exception as exc:  # Mermaid's parse errors arrive as a JS exception
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise DiagramError(f"{where}: a Mermaid diagram failed to render: {first}\n"
                               f"    fix: check the diagram's syntax (paste it into the Mermaid live editor "
                               f"of version {_version()}), or correct the fence") from None
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(svg, encoding="utf-8")
        tmp.replace(cached)
        self.rendered += 1
        return svg

    def replace_fences(self, page_html: str, where: str) -> str:
        def one(match: re.Match) -> str:
            svg = self.svg(html.unescape(match.group(1)), where)
            return f'<div class="mermaid mermaid-static" role="img" aria-label="{html.escape(_label(svg))}">{svg}</div>'

        return FENCE.sub(one, page_html)

    def close(self):
        if self._browser is not None:
            self._browser.close()
        if self._pw is not None:
            self._pw.stop()
        self._pw = self._browser = self._page = None
