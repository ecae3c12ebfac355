"""Math on Markdown pages rendered to HTML at build time with the pinned KaTeX (tools/katex-render.mjs).

pymdownx.arithmatex (generic mode) leaves `\\( … \\)` and `\\[ … \\]` in elements of class
`arithmatex`; the browser used to typeset them with KaTeX's JavaScript (about 80 KB gzip on every
page with a formula). Here node runs the same KaTeX version once per page for the formulas not yet
in the cache (.cache/math/, keyed by the formula, the display mode and the KaTeX version), so the
page needs only KaTeX's stylesheet and the fonts its formulas use. A formula KaTeX cannot parse
stops the build with the page, the formula and KaTeX's message. One node process serves the whole
build (line-delimited JSON on its stdin and stdout). Lab pages keep client-side
rendering (their Markdown cells use `$ … $`).
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("HANDBOOK_MATH_CACHE") or ROOT / ".cache" / "math")
SCRIPT = ROOT / "tools" / "katex-render.mjs"
MATH = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)


class MathError(RuntimeError):
    pass


def _version() -> str:
    return json.loads((ROOT / "node_modules" / "katex" / "package.json").read_text(encoding="utf-8"))["version"]


def enabled() -> bool:
    return os.environ.get("HANDBOOK_MATH", "static") != "client" and shutil.which("node") is not None


def _parse(tag: str, body: str) -> tuple[str, bool] | None:
    text = html.unescape(body).strip()
    if text.startswith("\\(") and text.endswith("\\)"):
        return text[2:-2], False
    if text.startswith("\\[") and text.endswith("\\]"):
        return text[2:-2], True
    return None


class _Node:
    """One node process for the whole build (starting node per page costs more than typesetting)."""

    def __init__(self):
        self.proc = subprocess.Popen(["node", str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, encoding="utf-8", cwd=ROOT)

    def render(self, items: list, where: str) -> list[dict]:
        try:
            self.proc.stdin.write(json.dumps(items) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            return json.loads(line)
        except (OSError, ValueError):
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise MathError(f"{where}: KaTeX could not run: {err.strip()[-500:]}\n"
                            "    fix: run `npm ci` (or `make setup`) so node_modules/katex exists") from None

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


_server: _Node | None = None


def _node() -> _Node:
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Node()
    return _server


def close() -> None:
    global _server
    if _server is not None:
        _server.close()
    _server = None


def render_page(page_html: str, where: str) -> str:
    """Replace every arithmatex element whose TeX KaTeX renders; the rest stay for the browser."""
    found = [(m, _parse(m.group(1), m.group(2))) for m in MATH.finditer(page_html)]
    found = [(m, p) for m, p in found if p is not None]
    if not found:
        return page_html
    version = _version()

    def key(tex, display):
        return hashlib.sha256(f"{version}|{int(display)}|{tex}".encode()).hexdigest()[:20]

    missing = {key(t, d): (t, d) for _, (t, d) in found if not (CACHE / f"{key(t, d)}.html").exists()}
    if missing:
        results = _node().render(list(missing.values()), where)
        CACHE.mkdir(parents=True, exist_ok=True)
        for (k, (tex, _)), result in zip(missing.items(), results):
            if "error" in result:
                raise MathError(f"{where}: KaTeX cannot typeset the formula `{tex.strip()[:120]}`: {result['error']}\n"
                                "    fix: correct the TeX (KaTeX supports most of LaTeX math; see "
                                "its list of supported functions)")
            (CACHE / f"{k}.html").write_text(result["html"], encoding="utf-8")

    def one(m: re.Match) -> str:
        parsed = _parse(m.group(1), m.group(2))
        if parsed is None:
            return m.group(0)
        rendered = (CACHE / f"{key(*parsed)}.html").read_text(encoding="utf-8")
        if parsed[1]:  # a wide display formula scrolls sideways (extra.css): keyboard users must reach it
            rendered = rendered.replace('<span class="katex-display">', '<span class="katex-display" tabindex="0">', 1)
            return f'<{m.group(1)} class="math-static">{rendered}</{m.group(1)}>'
        return f'<span class="math-static">{rendered}</span>'

    return MATH.sub(one, page_html)
