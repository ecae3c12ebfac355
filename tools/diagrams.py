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

Legibility (issue 30): a diagram scaled to the column made labels of wide diagrams 4 px on a
desktop and 2 px on a phone. Each SVG now carries the smallest label size it has at its natural
size (`data-label-px`, measured in Chromium when it is rendered) and gets a minimum width that keeps
every label at LABEL_MIN_PX or more; what is wider than the column scrolls inside it (with a scroll
cue, docs/assets/stylesheets/reader.css). A flowchart too wide for a phone is also rendered in the
other direction (LR <-> TB), and each screen class shows the variant that needs the least sideways
scrolling (`_pick`). Every diagram opens full screen with zoom and pan on a click, a tap or its
button (docs/assets/javascripts/diagram-zoom.js); tests/test_reader_layout.py measures all of it.
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
# Legibility: the smallest label size a diagram may be shown at (CSS px), and the content column's
# width in Material's layout at a 1440 px desktop and a 390 px phone (measured: tests/test_reader_layout.py).
LABEL_MIN_PX = 11.0
DESKTOP_COLUMN, PHONE_COLUMN = 688.0, 358.0
DESKTOP_MAX_HEIGHT, PHONE_MAX_HEIGHT = 1400.0, 2000.0  # a variant in the other direction may be this tall
# Mermaid's options; the state-diagram and Gantt text that Mermaid sets at 10-11 px is set like the
# rest, and a Gantt chart is laid out for the desktop column instead of the rendering page's width.
CONFIG = {"sequence": {"actorFontSize": "16px", "messageFontSize": "16px", "noteFontSize": "16px"},
          "gantt": {"useWidth": 680, "fontSize": 14, "sectionFontSize": 14}}
EXTRA_CSS = "g.stateGroup text,.stateLabel text,.state-note text,g.tick text{font-size:14px}"
FORMAT = "2"  # of the cached SVG (data-label-px on the root element); part of the cache key
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


_ZOOM_ICON = ('<svg viewBox="0 0 24 24" aria-hidden="true" focusable="false"><path d="M5 5h5V3H3v7h2V5m5 14H5v-5H3v7h7v-2'
              'm11-2h-2v5h-5v2h7v-7m-2-7h2V3h-7v2h5v5z"/></svg>')
_HEADER = re.compile(r"^(\s*)(flowchart|graph)(\s+)(LR|RL|TB|TD|BT)\b")
_FLIP = {"LR": "TB", "RL": "BT", "TB": "LR", "TD": "LR", "BT": "RL"}


def _flipped(text: str) -> str | None:
    """The same flowchart laid out in the other direction, or None for other diagram types."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip() or line.strip().startswith("%%"):
            continue
        m = _HEADER.match(line)
        if m is None:
            return None
        lines[i] = f"{m[1]}{m[2]}{m[3]}{_FLIP[m[4]]}{line[m.end():]}"
        return "\n".join(lines)
    return None


def _info(svg: str) -> dict:
    """Natural width and height (the viewBox) and smallest label (CSS px) of a rendered diagram."""
    head = svg[:svg.find(">") + 1]
    box = re.search(r'viewBox="[-\d.e]+ [-\d.e]+ ([\d.e]+) ([\d.e]+)"', head)
    label = re.search(r'data-label-px="([\d.]+)"', head)
    width, height = (float(box[1]), float(box[2])) if box else (600.0, 400.0)
    return {"width": max(width, 1.0), "height": max(height, 1.0), "label": float(label[1]) if label else 16.0}


def _fit(info: dict, column: float) -> dict:
    """How a diagram shows in a column: scaled to fit, but never below LABEL_MIN_PX (then it scrolls)."""
    floor = info["width"] * LABEL_MIN_PX / info["label"]  # the narrowest width with legible labels
    shown = min(max(column, floor), max(info["width"], floor))  # never wider than natural size
    scale = shown / info["width"]
    return {"overflow": max(0.0, shown - column), "label": info["label"] * scale, "height": info["height"] * scale}


def _pick(infos: list[dict], column: float, max_height: float) -> int:
    """The variant to show in a column: least sideways scrolling, then larger labels, then the author's."""
    def score(i: int):
        fit = _fit(infos[i], column)
        return (i > 0 and fit["height"] > max_height, round(fit["overflow"] / column, 1),
                -(min(fit["label"], 16.0) // 2), i)

    return min(range(len(infos)), key=score)


def _sized(svg: str) -> str:
    """The root element's max-width (Mermaid's: the natural width) and a min-width that keeps labels legible."""
    info = _info(svg)
    low = info["width"] * LABEL_MIN_PX / info["label"]
    high = max(info["width"], low)
    end = svg.find(">")
    head, rest = svg[:end], svg[end:]
    style = f"max-width: {high:.1f}px; min-width: {min(low, high):.1f}px;"
    if re.search(r'\sstyle="[^"]*"', head):
        head = re.sub(r'\sstyle="[^"]*"', f' style="{style}"', head, count=1)
    else:
        head += f' style="{style}"'
    return head + rest


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
            self._css = theme_css() + EXTRA_CSS
            config = json.dumps(CONFIG, sort_keys=True)
            self._salt = hashlib.sha256(f"{_version()}\n{FORMAT}\n{config}\n{self._css}".encode()).hexdigest()[:16]
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
            window.__renderDiagram = async (id, text, themeCSS, config) => {
                mermaid.initialize({startOnLoad: false, themeCSS, fontFamily: "var(--md-mermaid-font-family)", ...config});
                const svg = (await mermaid.render(id, text)).svg;
                // the smallest label at natural size (CSS px): font size times the label's scale
                const box = document.createElement("div");
                box.innerHTML = svg;
                document.body.appendChild(box);
                const root = box.querySelector("svg");
                const vb = root.viewBox.baseVal;
                root.style.maxWidth = "none";
                root.style.width = (vb && vb.width ? vb.width : root.getBoundingClientRect().width) + "px";
                const outer = root.getScreenCTM();
                let min = Infinity;
                for (const el of root.querySelectorAll("text, tspan, foreignObject *")) {
                    if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
                    const cs = getComputedStyle(el);
                    if (cs.display === "none" || cs.visibility === "hidden") continue;
                    const m = (el.closest("foreignObject") || el).getScreenCTM();
                    if (!m || !outer) continue;
                    min = Math.min(min, parseFloat(cs.fontSize) * Math.hypot(m.a, m.b) / Math.hypot(outer.a, outer.b));
                }
                box.remove();
                return {svg, labelPx: Number.isFinite(min) ? Math.round(min * 10) / 10 : 16};
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
            result = self._page.evaluate("([id, text, css, config]) => window.__renderDiagram(id, text, css, config)",
                                         [f"mermaid-{key}", text, self._css, CONFIG])
        except Exception as exc:  # Mermaid's parse errors arrive as a JS exception
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise DiagramError(f"{where}: a Mermaid diagram failed to render: {first}\n"
                               f"    fix: check the diagram's syntax (paste it into the Mermaid live editor "
                               f"of version {_version()}), or correct the fence") from None
        svg = result["svg"].replace("<svg ", f'<svg data-label-px="{result["labelPx"]:g}" ', 1)
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_text(svg, encoding="utf-8")
        tmp.replace(cached)
        self.rendered += 1
        return svg

    def replace_fences(self, page_html: str, where: str) -> str:
        def one(match: re.Match) -> str:
            text = html.unescape(match.group(1))
            svg = self.svg(text, where)
            variants = [svg]
            flipped = _flipped(text)
            if flipped is not None and _fit(_info(svg), PHONE_COLUMN)["label"] < 13:
                variants.append(self.svg(flipped, where))
            infos = [_info(s) for s in variants]
            wide = _pick(infos, DESKTOP_COLUMN, DESKTOP_MAX_HEIGHT)
            narrow = _pick(infos, PHONE_COLUMN, PHONE_MAX_HEIGHT)
            label = html.escape(_label(svg))
            out = f'<div class="mermaid mermaid-static" role="img" aria-label="{label}">{_sized(variants[wide])}</div>'
            cls = "diagram"
            if narrow != wide:  # phones show the other direction (reader.css); search indexes the diagram once
                cls += " diagram--narrow"
                out += (f'<div class="mermaid mermaid-narrow" role="img" aria-label="{label}">'
                        f'{_sized(variants[narrow]).replace("<svg ", "<svg data-search-exclude ", 1)}</div>')
            return (f'<div class="{cls}">{out}<button type="button" class="diagram__zoom" '
                    f'title="全屏查看（可缩放）" aria-label="全屏查看这张图（可缩放、拖动）">{_ZOOM_ICON}</button></div>')

        return FENCE.sub(one, page_html)

    def close(self):
        if self._browser is not None:
            self._browser.close()
        if self._pw is not None:
            self._pw.stop()
        self._pw = self._browser = self._page = None
