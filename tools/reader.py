"""Build-time fixes for how pages read (issue 30): called from tools/hooks.py and tools/pagepool.py.

Markdown pages (`page_html`, on the rendered HTML, before math is typeset):

- glossary abbreviations (data/glossary.yml, appended to every page by tools/hooks.py) were an
  underlined tooltip on every repeat of a term and inside headings: only the first occurrence of a
  term outside headings keeps its <abbr>; the others, and every one in a heading, become plain text;
- a display formula made of several formulas side by side (`a = …, \\qquad b = …`) is split at its
  top-level `\\qquad` into a row of formulas that wraps on a narrow screen (reader.css), instead of
  one line that overflows the column and looks cut off (the LayerNorm definition ended at "…r +").

Lab pages (`lab_heading`, `lab_images`, on the converted notebook):

- a heading with math (`## 2. 反向传播：由 logsumexp 重算 $P$`) is typeset in the page by KaTeX in
  the browser, but the table of contents showed its raw TeX: the TOC gets readable text ("P");
- a plot had nbconvert's alt text "No description has been provided for this image": it gets one
  from the cell that drew it: a caption comment the lab gives (`# 图注：…` or `# alt: …`), else the
  figure's titles and axis labels in the code, with the section it belongs to.
"""
from __future__ import annotations

import html as html_mod
import re

# ------------------------------------------------------------------ glossary abbreviations
_HEADING = re.compile(r"<(h[1-6])\b[^>]*>.*?</\1>", re.S)
_ABBR = re.compile(r'<abbr title="[^"]*">(.*?)</abbr>', re.S)


def glossary_once(page_html: str) -> str:
    """<abbr> only at a term's first occurrence outside headings (the tooltip then appears once per page)."""
    if "<abbr" not in page_html:
        return page_html
    headings = [(m.start(), m.end()) for m in _HEADING.finditer(page_html)]
    seen: set[str] = set()

    def one(m: re.Match) -> str:
        if any(a <= m.start() < b for a, b in headings):
            return m.group(1)
        term = html_mod.unescape(m.group(1))
        if term in seen:
            return m.group(1)
        seen.add(term)
        return m.group(0)

    return _ABBR.sub(one, page_html)


# ------------------------------------------------------------------ rows of display formulas
_DISPLAY = re.compile(r'<div class="arithmatex">\s*\\\[(.*?)\\\]\s*</div>', re.S)


def _split_qquad(tex: str) -> list[str]:
    """`tex` split at each `\\qquad` outside braces, environments and \\left…\\right pairs."""
    parts, depth, env, left, start, i = [], 0, 0, 0, 0, 0
    while i < len(tex):
        c = tex[i]
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+)", tex[i:])
            if m is None:
                i += 2  # an escaped character: \{ \} \\ \,
                continue
            name = m.group(1)
            if name == "begin":
                env += 1
            elif name == "end":
                env -= 1
            elif name == "left":
                left += 1
            elif name == "right":
                left -= 1
            elif name == "qquad" and depth == 0 and env == 0 and left == 0:
                parts.append(tex[start:i])
                start = i + m.end()
            i += m.end()
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        i += 1
    parts.append(tex[start:])
    parts = [p.strip() for p in parts]
    return parts if len(parts) > 1 and all(parts) else [tex]


def math_rows(page_html: str) -> str:
    """A display formula of several side-by-side formulas becomes a wrapping row of display formulas."""
    if "\\qquad" not in page_html:
        return page_html

    def one(m: re.Match) -> str:
        parts = _split_qquad(m.group(1))
        if len(parts) == 1:
            return m.group(0)
        return ('<div class="math-row">' + "".join(f'<div class="arithmatex">\\[{p}\\]</div>' for p in parts)
                + "</div>")

    return _DISPLAY.sub(one, page_html)


def page_html(page_html: str) -> str:
    return math_rows(glossary_once(page_html))


# ------------------------------------------------------------------ lab headings: TeX as text
_SYMBOLS = {
    "infty": "∞", "times": "×", "cdot": "·", "cdots": "⋯", "ldots": "…", "dots": "…", "le": "≤", "leq": "≤",
    "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "sim": "∼", "to": "→", "rightarrow": "→",
    "leftarrow": "←", "gets": "←", "sum": "Σ", "prod": "Π", "sqrt": "√", "pm": "±", "mp": "∓", "in": "∈",
    "ell": "ℓ", "partial": "∂", "nabla": "∇", "top": "ᵀ", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈",
    "rceil": "⌉", "log": "log", "exp": "exp", "max": "max", "min": "min", "quad": " ", "qquad": "  ",
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "eta": "η",
    "theta": "θ", "lambda": "λ", "mu": "μ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ",
    "varphi": "φ", "omega": "ω", "Delta": "Δ", "Sigma": "Σ", "Omega": "Ω",
}
_SUP_CHARS, _SUB_CHARS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱᵏᵀ", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑᵢⱼₖₙₘₒₚᵣₛₜₓ"
_SUP = (str.maketrans("0123456789+-=()nikT", _SUP_CHARS), _SUP_CHARS)
_SUB = (str.maketrans("0123456789+-=()aeijknmoprstx", _SUB_CHARS), _SUB_CHARS)


def _script(body: str, table: tuple, mark: str) -> str:
    """A super- or subscript in Unicode where every character has one, else `^x` / `_(xy)`."""
    text = body.strip().translate(table[0])
    if text and all(c in table[1] for c in text):
        return text
    return f"{mark}{body}" if len(body) == 1 else f"{mark}({body})"


def tex_text(tex: str) -> str:
    """Readable text for a short TeX formula (a heading's `$QK^\\top$` → QKᵀ)."""
    s = re.sub(r"\\(?:mathrm|mathbf|mathit|mathsf|text|textbf|operatorname|boldsymbol)\s*\{([^{}]*)\}", r"\1", tex)
    s = re.sub(r"\\([A-Za-z]+)\s*", lambda m: _SYMBOLS.get(m.group(1), m.group(1)), s)
    s = re.sub(r"\\(.)", r"\1", s)  # \{ \} \, \%
    s = re.sub(r"\^\{([^{}]*)\}|\^(.)", lambda m: _script(m.group(1) if m.group(1) is not None else m.group(2),
                                                           _SUP, "^"), s)
    s = re.sub(r"_\{([^{}]*)\}|_(.)", lambda m: _script(m.group(1) if m.group(1) is not None else m.group(2),
                                                         _SUB, "_"), s)
    s = s.replace("{", "").replace("}", "")
    s = re.sub(r"(?<=\s)-(?=\s)", "−", s)
    return re.sub(r"\s+", " ", s).strip()


def lab_heading(name: str) -> str:
    """A lab heading's text for the table of contents: `$…$` and `\\(…\\)` math as readable text."""
    name = re.sub(r"\$\$(.+?)\$\$|\$(.+?)\$", lambda m: tex_text(m.group(1) or m.group(2)), name)
    return re.sub(r"\\\((.+?)\\\)", lambda m: tex_text(m.group(1)), name)


# ------------------------------------------------------------------ lab plots: alt text
DEFAULT_ALT = "No description has been provided for this image"
_CAPTION = re.compile(r"^\s*#\s*(?:图注|alt)\s*[:：]\s*(.+?)\s*$", re.M | re.I)
_STRING = r"""(?:[rRfFbBuU]{0,2})("{3}|'{3}|"|')(.+?)\1"""
_TITLE = re.compile(r"\b(?:set_title|title|suptitle)\(\s*" + _STRING)
_XLABEL = re.compile(r"\b(?:set_xlabel|xlabel)\(\s*" + _STRING)
_YLABEL = re.compile(r"\b(?:set_ylabel|ylabel)\(\s*" + _STRING)


def _literal(text: str) -> str:
    """A string literal of the code as a reader sees it: f-string fields become '…', TeX becomes text."""
    text = re.sub(r"\{[^{}]*\}", "…", text.replace("{{", "\0").replace("}}", "\1")).replace("\0", "{").replace("\1", "}")
    text = lab_heading(text)
    return re.sub(r"\s+", " ", text).strip(" :：,，")


def _unique(items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if item and item != "…" and item not in out:
            out.append(item)
    return out


def plot_alt(code: str, section: str | None) -> str:
    """Alt text for a figure drawn by `code`, in the lab section `section`."""
    caption = _CAPTION.search(code)
    if caption:
        return caption.group(1)
    titles = _unique([_literal(m.group(2)) for m in _TITLE.finditer(code)])
    xs = _unique([_literal(m.group(2)) for m in _XLABEL.finditer(code)])
    ys = _unique([_literal(m.group(2)) for m in _YLABEL.finditer(code)])
    where = f"“{section}”一节" if section else "本实验"
    if not titles and not xs and not ys:
        return f"{where}的输出图"
    text = f"{where}的图" + (f"：{'；'.join(titles)}" if titles else "")
    axes = "；".join(([f"横轴 {'、'.join(xs)}"] if xs else []) + ([f"纵轴 {'、'.join(ys)}"] if ys else []))
    if axes:
        text += f"（{axes}）"
    return text if len(text) <= 300 else text[:299] + "…"


def lab_images(soup) -> None:
    """Give every plot of a converted lab (BeautifulSoup, in place) an alt text from the cell that drew it."""
    section = None
    for el in soup.find_all(re.compile(r"^(h[1-4]|img)$")):
        if el.name != "img":
            section = lab_heading(el.get_text(" ", strip=True).rstrip("¶").strip())
            continue
        if el.get("alt") not in (None, "", DEFAULT_ALT):
            continue
        cell = el.find_parent("div", class_="jp-CodeCell")
        code = cell.select_one("div.jp-InputArea pre") if cell is not None else None
        el["alt"] = plot_alt(code.get_text() if code is not None else "", section)


# ------------------------------------------------------------------ measuring it in a browser
# JavaScript for Playwright's page.evaluate, shared by tests/test_reader_layout.py and `make bench-site`
# (tools/sitebench.py): for every diagram of the page, the smallest label as rendered (CSS px: the
# label's font size times the scale its SVG is drawn at), in the variant the screen shows.
DIAGRAM_LABELS_JS = r"""() => {
  const out = [];
  const boxes = [...document.querySelectorAll('.diagram, .mermaid-static')]
    .filter(b => !(b.parentElement && b.parentElement.classList.contains('diagram')));
  boxes.forEach((d, index) => {
    const views = d.classList.contains('diagram') ? [...d.querySelectorAll(':scope > .mermaid')] : [d];
    const view = views.find(v => v.getClientRects().length > 0);
    const svg = view && view.querySelector(':scope > svg');
    if (!svg) { out.push({index, min: null, hidden: true}); return; }
    let min = Infinity;
    for (const el of svg.querySelectorAll('text, tspan, foreignObject *')) {
      if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
      const cs = getComputedStyle(el);
      if (cs.display === 'none' || cs.visibility === 'hidden') continue;
      const m = (el.closest('foreignObject') || el).getScreenCTM();
      if (!m) continue;
      min = Math.min(min, parseFloat(cs.fontSize) * Math.hypot(m.a, m.b));
    }
    const r = svg.getBoundingClientRect();
    out.push({index, min: Number.isFinite(min) ? Math.round(min * 10) / 10 : null, width: Math.round(r.width),
              column: view.clientWidth, scrolls: view.scrollWidth > view.clientWidth + 1,
              label: (view.getAttribute('aria-label') || '').slice(0, 60)});
  });
  return out;
}"""


def diagram_label_figures(browser, base: str, site) -> dict:
    """`make bench-site`: the smallest diagram label of the whole site at a 1440 px desktop and a 390 px
    phone, where it is, and how many diagrams have a label under 11 px (Playwright browser, served site)."""
    from pathlib import Path

    pages = []
    for f in sorted(Path(site).rglob("index.html")):
        rel = f.parent.relative_to(site).as_posix()
        text = f.read_text(encoding="utf-8") if not rel.startswith(("assets", "print_page")) else ""
        if 'class="diagram' in text or "mermaid-static" in text:  # (the second: sites built before issue 30)
            pages.append("" if rel == "." else rel + "/")
    out = {}
    for width, extra in ((1440, {}), (390, {"device_scale_factor": 2, "is_mobile": True, "has_touch": True})):
        context = browser.new_context(viewport={"width": width, "height": 900}, **extra)
        page = context.new_page()
        smallest, where, count, under = float("inf"), "", 0, 0
        for path in pages:
            page.goto(base + path, wait_until="load")
            for d in page.evaluate(DIAGRAM_LABELS_JS):
                if d.get("min") is None:
                    continue
                count += 1
                under += d["min"] < 11
                if d["min"] < smallest:
                    smallest, where = d["min"], f"/{path}"
        context.close()
        out[width] = {"min": smallest if count else None, "where": where, "diagrams": count, "under_11": under}
    return out
