"""What the search index holds, and what it adds to what the pages say (tools/hooks.py calls this).

Material's search plugin indexes a page's rendered HTML. Three things in that HTML made results noisy:

- a formula typeset at build time (tools/katex_static.py) is KaTeX's MathML (whose text is the
  formula once more, plus its TeX source in an <annotation>) and KaTeX's HTML rendering: the index
  carried every formula three times, and snippets read `(m,ℓ,acc)(m, \\ell, \\mathrm{acc})(m,ℓ,acc)`;
- a lab's outputs (stdout, stderr, tables and plots printed by its cells) were indexed with its
  prose: the second hit for FlashAttention was a screen of `B=1 H=2 N=  64 …` lines;
- a lab's code cells were not indexed at all, so `tl.dot` or `do_bench` found no lab.

`for_index` gives the indexer a view of the page without them: each formula becomes one readable
line of text made from its TeX source (`(m, ℓ, acc)`), a lab's output areas go, its code cells come
in (all but the setup cell, the same in every lab, and the copy button's hidden duplicate), marked so
that `finalize` moves the words they use into a field of their own weighing a tenth of prose (a lab
repeats its identifiers in every cell and would otherwise outrank the page that explains them). The
published page is unchanged.

`finalize` post-processes the written index (search/search_index.json):

- synonyms (data/search-synonyms.yml): what a reader types (`zero3`, `FA2`, `虚表`) is added as
  hidden keywords to the sections that carry the site's own term (ZeRO-3, FlashAttention-2,
  虚函数表), in two extra fields: `keywords` (boosted like a title) for sections whose heading
  carries the term, `related` (like body text, repeated as often as the term occurs, up to 3) for
  the others. An entry whose term appears nowhere on the site stops the build, naming file and line;
- search/terms.json: the terms the no-hit suggestions offer (page titles, glossary, synonyms),
  fetched by docs/assets/javascripts/search-suggest.js only when a query finds nothing.
"""
from __future__ import annotations

import hashlib
import html
import inspect
import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml

ROOT = Path(__file__).resolve().parents[1]
SYNONYMS = ROOT / "data" / "search-synonyms.yml"
GLOSSARY = ROOT / "data" / "glossary.yml"
# The pages a no-hit search always offers.
GLOSSARY_PAGE = "resources/glossary/"
QUESTIONS_PAGE = "interview/questions-by-layer/"
# Extra index fields: a hidden keyword in `keywords` weighs like a title word, in `related` like body
# text; a lab's code (`code`) a tenth of body text.
FIELDS = {"keywords": 1e3, "related": 1.0, "code": 0.1}


class SearchDataError(RuntimeError):
    pass


# ------------------------------------------------------------------ the indexer's view of a page
_TAG = re.compile(r"<(/?)(span|div)\b[^>]*>")


def _element_end(text: str, start: int, tag: str) -> int:
    """Index just past the element that opens at `start` (its own nested tags of the same name balanced)."""
    depth = 0
    for m in _TAG.finditer(text, start):
        if m.group(2) != tag:
            continue
        if m.group(1):
            depth -= 1
            if depth == 0:
                return m.end()
        elif not m.group(0).endswith("/>"):
            depth += 1
    return len(text)


def _replace_elements(text: str, opening: str, tag: str, replace) -> str:
    out, pos = [], 0
    while True:
        start = text.find(opening, pos)
        if start < 0:
            break
        end = _element_end(text, start, tag)
        out.append(text[pos:start])
        out.append(replace(text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


# TeX to one line of readable text: letters and operators as the reader sees them, structure kept
# with ^, _, / and parentheses. It is for the index and the result snippet, not for typesetting.
_TEX_SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "zeta": "ζ",
    "eta": "η", "theta": "θ", "vartheta": "θ", "iota": "ι", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν",
    "xi": "ξ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ", "upsilon": "υ", "phi": "φ", "varphi": "φ",
    "chi": "χ", "psi": "ψ", "omega": "ω", "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ",
    "Pi": "Π", "Sigma": "Σ", "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω", "ell": "ℓ", "infty": "∞", "partial": "∂",
    "nabla": "∇", "times": "×", "cdot": "·", "cdots": "⋯", "ldots": "…", "dots": "…", "pm": "±", "mp": "∓",
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "sim": "∼",
    "equiv": "≡", "propto": "∝", "ll": "≪", "gg": "≫", "to": "→", "rightarrow": "→", "leftarrow": "←",
    "Rightarrow": "⇒", "Leftarrow": "⇐", "leftrightarrow": "↔", "mapsto": "↦", "gets": "←", "in": "∈",
    "notin": "∉", "subset": "⊂", "subseteq": "⊆", "cup": "∪", "cap": "∩", "forall": "∀", "exists": "∃",
    "neg": "¬", "land": "∧", "lor": "∨", "wedge": "∧", "vee": "∨", "oplus": "⊕", "otimes": "⊗", "odot": "⊙",
    "circ": "∘", "top": "⊤", "bot": "⊥", "perp": "⊥", "sum": "∑", "prod": "∏", "int": "∫", "sqrt": "√",
    "lceil": "⌈", "rceil": "⌉", "lfloor": "⌊", "rfloor": "⌋", "langle": "⟨", "rangle": "⟩", "mid": "|",
    "vert": "|", "Vert": "‖", "|": "‖", "lvert": "|", "rvert": "|", "lVert": "‖", "rVert": "‖",
    "{": "{", "}": "}", "%": "%", "$": "$", "&": "&", "#": "#", "_": "_", "prime": "′", "emptyset": "∅",
    "varnothing": "∅", "star": "⋆", "ast": "∗", "div": "÷", "setminus": "∖", "aleph": "ℵ", "hbar": "ℏ",
    "Re": "ℜ", "Im": "ℑ", "deg": "°", "colon": ":", "downarrow": "↓", "uparrow": "↑", "triangleq": "≜",
    "coloneqq": "≔", "preceq": "⪯", "succeq": "⪰", "prec": "≺", "succ": "≻", "lesssim": "≲", "gtrsim": "≳",
}
_TEX_SPACES = {",", ";", ":", "!", " ", "quad", "qquad", "enspace", "thinspace", "medspace", "thickspace"}
_TEX_DROP = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr",
             "displaystyle", "textstyle", "scriptstyle", "limits", "nolimits", "middle"}
_TEX_GROUP = re.compile(r"\\(?:operatorname\*?|mathrm|mathbf|mathit|mathsf|mathtt|mathcal|mathbb|mathfrak|"
                        r"boldsymbol|bm|text|textrm|textbf|textit|texttt|mbox|hat|bar|tilde|vec|dot|ddot|"
                        r"widehat|widetilde|overline|underline|mathring)\s*\{([^{}]*)\}")
_TEX_ACCENT = {"hat": "̂", "bar": "̄", "tilde": "̃", "vec": "⃗", "dot": "̇", "ddot": "̈", "widehat": "̂",
               "widetilde": "̃", "overline": "̄"}


def readable_tex(tex: str) -> str:
    """`(m, \\ell, \\mathrm{acc})` -> `(m, ℓ, acc)`; `\\frac{QK^\\top}{\\sqrt{d}}` -> `(QK^⊤)/(√(d))`."""
    s = tex.replace("\n", " ")
    s = re.sub(r"\\begin\{[a-zA-Z*]+\}(\{[^{}]*\})?|\\end\{[a-zA-Z*]+\}", " ", s)
    s = s.replace("\\\\", "; ").replace("&", " ")
    for _ in range(8):  # innermost groups first, until nothing changes
        before = s

        def group(m: re.Match) -> str:
            cmd = m.group(0)[1:].split("{")[0].strip().rstrip("*")
            accent = _TEX_ACCENT.get(cmd)
            inner = m.group(1)
            return inner + accent if accent and len(inner) == 1 else inner

        s = _TEX_GROUP.sub(group, s)
        s = re.sub(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", lambda m: f"{_paren(m.group(1))}/{_paren(m.group(2))}", s)
        s = re.sub(r"\\sqrt\s*\[([^\]]*)\]\s*\{([^{}]*)\}", lambda m: f"{m.group(1)}√({m.group(2)})", s)
        s = re.sub(r"\\sqrt\s*\{([^{}]*)\}", lambda m: f"√{_paren(m.group(1))}", s)
        s = re.sub(r"\\binom\s*\{([^{}]*)\}\s*\{([^{}]*)\}", lambda m: f"C({m.group(1)}, {m.group(2)})", s)
        s = re.sub(r"([_^])\{([^{}]*)\}", lambda m: m.group(1) + (m.group(2) if re.fullmatch(r"\S+", m.group(2))
                                                                   else f"({m.group(2)})"), s)
        if s == before:
            break

    def command(m: re.Match) -> str:
        name = m.group(1)
        if name in _TEX_SPACES:
            return " "
        if name in _TEX_DROP:
            return ""
        if name in _TEX_SYMBOLS:
            return _TEX_SYMBOLS[name]
        return name  # \log, \exp, \max, \softmax as words

    s = re.sub(r"\\([a-zA-Z]+|[,;:! {}%$&#_|])", command, s)
    s = s.replace("{", "").replace("}", "").replace("~", " ")
    return " ".join(s.split())


def _paren(text: str) -> str:
    text = text.strip()
    return text if re.fullmatch(r"[\w.′⊤\\]+", text) else f"({text})"


_ANNOTATION = re.compile(r'<annotation encoding="application/x-tex">(.*?)</annotation>', re.S)


def _formula_text(element: str) -> str:
    m = _ANNOTATION.search(element)
    if m is None:  # no TeX source: keep the MathML text once, drop the visual rendering
        mathml = element.split('<span class="katex-html"', 1)[0]
        text = re.sub(r"<[^>]+>", "", mathml)
    else:
        text = readable_tex(html.unescape(m.group(1)))
    return " " + html.escape(text, quote=False) + " "


# mkdocs.yml's search separator (finalize uses the one the index was built with)
_SEPARATOR = re.compile(r'[\s\u200b\-_,:!=\[\]()"`/]+|\.(?!\d)|&[lg]t;')
_SETUP_CELL = "celltag_setup"
_CELL = re.compile(r'<div class="jp-Cell jp-(?:Code|Markdown|Raw)Cell[^"]*"')


# A lab's code goes into its own field (finalize moves it there), weighing a tenth of prose: a lab
# repeats its identifiers in every cell, and indexed as prose its code pushed the sort page from 2nd
# to 5th for `__syncthreads` (labs calling cuda.syncthreads() came first). The marks are private-use
# characters, which no page uses.
CODE_START, CODE_END = "\ue000", "\ue001"
_LAB_PRE = re.compile(r'<pre data-search-exclude="true"([^>]*)>(.*?)</pre>', re.S)
_CODE_SPAN = re.compile("<pre>" + CODE_START + "(.*?)" + CODE_END + "</pre>", re.S)


def _lab_code_in(text: str) -> str:
    """Index a lab's code cells: lift the exclusion tools/pagepool.py put on their <pre> and mark their
    text for the code field (the setup cell, the same in every lab, and the copy button's hidden
    duplicate of each cell stay out)."""
    marks = [m.start() for m in _CELL.finditer(text)] + [len(text)]
    out = [text[:marks[0]]]
    for start, end in zip(marks, marks[1:]):
        cell = text[start:end]
        head = cell[:cell.find(">") + 1]
        if "jp-CodeCell" in head and _SETUP_CELL not in head:
            cell = _LAB_PRE.sub(lambda m: f"<pre{m.group(1)}>{CODE_START}{m.group(2)}{CODE_END}</pre>", cell)
        out.append(cell)
    return "".join(out)


def split_code(doc: dict, separator: re.Pattern | None = None) -> None:
    """Move a lab section's marked code from `text` (what the snippet shows) to the `code` field, as
    the words it uses, each once: the field is searched, never shown, and a lab's code repeats its
    identifiers (the words are about a fifth of the code's size)."""
    text = doc.get("text", "")
    if CODE_START not in text:
        return
    words: dict[str, str] = {}
    for m in _CODE_SPAN.finditer(text):  # split (still HTML-escaped) as the browser's indexer splits it
        for w in (separator or _SEPARATOR).split(m.group(1)):
            w = re.sub(r"^\W+|\W+$", "", w)  # what lunr's trimmer keeps of it
            if (len(w) > 1 or re.match(r"[^\x00-\x7f]", w)) and re.search(r"[^\W\d_]", w):
                words.setdefault(w.casefold(), w)
    doc["text"] = re.sub(f"[{CODE_START}{CODE_END}]", "", re.sub(r"  +", " ", _CODE_SPAN.sub(" ", text))).strip()
    if words:
        doc["code"] = " ".join(words.values())


def indexable(content: str) -> str:
    """The page's HTML as the search indexer should see it (the published page keeps everything)."""
    text = content
    if 'class="katex"' in text:
        text = _replace_elements(text, '<span class="katex">', "span", _formula_text)
    if "jupyter-wrapper" in text:
        text = _replace_elements(text, '<div class="jp-Cell-outputWrapper"', "div", lambda _: "")
        text = _lab_code_in(text)
    return text


# Part of the search-entry cache key (tools/hooks.py): a change to the page view re-indexes every page
# (the synonyms and the rest of finalize run on every build anyway).
# (sets are sorted: their order changes with the interpreter's hash seed)
SALT = hashlib.sha256("".join(
    inspect.getsource(f) for f in (_element_end, _replace_elements, readable_tex, _paren, _formula_text,
                                   _lab_code_in, indexable)).encode()
    + repr((_TEX_SYMBOLS, sorted(_TEX_SPACES), sorted(_TEX_DROP), _TEX_GROUP.pattern, _TEX_ACCENT,
            _ANNOTATION.pattern, _CELL.pattern, _LAB_PRE.pattern, CODE_START, CODE_END)).encode()).hexdigest()[:16]


def for_index(page):
    """A stand-in for `page` that Material's SearchIndex.add_entry_from_context (and the worker in
    tools/pagepool.py) reads: the same page with the indexable view of its content."""
    return SimpleNamespace(meta=page.meta, content=indexable(page.content or ""), toc=page.toc,
                           url=page.url, title=page.title, file=getattr(page, "file", None))


# ------------------------------------------------------------------ synonyms
def load_synonyms(path: Path = SYNONYMS) -> list[dict]:
    """The synonym groups, each with the line it starts on; malformed entries raise with file, line and fix."""
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SearchDataError(f"{where}:{mark.line + 1 if mark else 1}: not valid YAML ({exc})") from None
    data = yaml.safe_load(text) or {}
    items = data.get("synonyms") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise SearchDataError(f"{where}:1: expected a top-level key `synonyms` holding a list "
                              "(fix: see the comment at the top of the file for the format)")
    nodes = next(v for k, v in root.value if k.value == "synonyms").value
    groups, seen = [], {}
    for item, node in zip(items, nodes):
        line = node.start_mark.line + 1
        if not isinstance(item, dict) or set(item) - {"terms", "aliases"} or not item.get("terms"):
            raise SearchDataError(f"{where}:{line}: an entry needs `terms` (how the site writes it, a list) and may "
                                  "have `aliases` (what readers type, a list); no other keys "
                                  "(fix: e.g. `- {terms: [ZeRO-3], aliases: [zero3]}`)")
        terms, aliases = item["terms"], item.get("aliases") or []
        if not isinstance(terms, list) or not isinstance(aliases, list) or \
                not all(isinstance(t, str) and t.strip() for t in terms + aliases):
            raise SearchDataError(f"{where}:{line}: `terms` and `aliases` must be lists of non-empty strings "
                                  "(fix: quote a term that YAML reads as a number or a boolean)")
        for word in terms + aliases:
            key = word.casefold()
            if key in seen:
                raise SearchDataError(f"{where}:{line}: {word!r} is already listed at line {seen[key]} "
                                      "(fix: keep one entry per word; merge the two groups if they mean the same)")
            seen[key] = line
        groups.append({"terms": terms, "aliases": aliases, "line": line, "file": where})
    return groups


def plain(text: str) -> str:
    """An index field as the reader sees it: no tags, entities decoded, no word-break marks, case folded."""
    text = re.sub(r"<[^>]+>", " ", text.replace("\u200b", ""))
    return " ".join(html.unescape(text).split()).casefold()


class _Term:
    """A word as a case-folded pattern (whole words at Latin edges, any spacing between its words),
    with a literal piece of it that a text must contain first (a fast substring test)."""

    def __init__(self, word: str):
        t = " ".join(word.split()).casefold()
        self.key = max(t.split(), key=len)
        body = re.escape(t).replace(r"\ ", r"\s*")
        head = r"(?<![0-9a-z])" if re.match(r"[0-9a-z]", t) else ""
        tail = r"(?![0-9a-z])" if re.search(r"[0-9a-z]$", t) else ""
        self.pattern = re.compile(head + body + tail)

    def count(self, text: str) -> int:
        return len(self.pattern.findall(text)) if self.key in text else 0

    def search(self, text: str) -> bool:
        return self.key in text and self.pattern.search(text) is not None


_terms: dict[str, _Term] = {}


def _pattern(word: str) -> _Term:
    if word not in _terms:
        _terms[word] = _Term(word)
    return _terms[word]


def _segment(text: str) -> str:
    """Chinese words separated the way Material's indexer separates them (jieba, U+200B)."""
    from material.plugins.search.plugin import SearchIndex

    return SearchIndex()._segment_chinese(text)


def plain_fields(docs: list[dict]) -> tuple[list[str], list[str]]:
    return [plain(d.get("title", "")) for d in docs], [plain(d.get("text", "")) for d in docs]


def _one_token(word: str, separator: re.Pattern) -> bool:
    """Whether the index holds `word` as one token (so it can weigh like a title word without
    lending a common word, such as `memory` of `pinned memory`, a title's weight)."""
    return len([t for t in separator.split(_segment(html.escape(word, quote=False))) if t]) == 1


def _page_of(location: str) -> str:
    return location.split("#", 1)[0]


def apply_synonyms(docs: list[dict], groups: list[dict], fields: tuple[list[str], list[str]] | None = None,
                   separator: re.Pattern | None = None) -> list[str]:
    """Add each group's other words to the sections that carry one of its terms; return the problems
    (a term that appears in no section), each naming file, line and fix.

    A section whose heading carries a term gets the other words in `keywords` (weighing like its
    heading); a section whose text carries it gets them in `related` (like text, once per occurrence,
    up to 3). When no heading carries any term, the page that uses the terms most is their home: its
    first section gets them in `keywords` too, so `zero3` leads to the ZeRO page rather than to every
    page that mentions ZeRO-3 once. Only words the index holds as one token get a heading's weight."""
    problems = []
    titles, texts = fields or plain_fields(docs)
    extra: list[tuple[list[str], list[str]]] = [([], []) for _ in docs]
    first_section: dict[str, int] = {}
    for i, d in enumerate(docs):  # a page's first entry with text: the h1 section, or a lab's top entry
        page, j = _page_of(d["location"]), first_section.get(_page_of(d["location"]))
        if j is None or (not texts[j] and texts[i]):
            first_section[page] = i
    for g in groups:
        pats = {t: _pattern(t) for t in g["terms"]}
        found = {t: False for t in g["terms"]}
        words = g["terms"] + g["aliases"]
        heavy = [w for w in words if _one_token(w, separator or _SEPARATOR)]
        in_a_title = False
        per_page: dict[str, int] = {}
        best, best_score = None, 0.0  # the section a no-hit suggestion of these words links to
        for i, (title, text) in enumerate(zip(titles, texts)):
            in_title = [t for t, p in pats.items() if p.search(title)]
            if in_title:  # a heading beats text; a page's own title, a page over a lab, a short heading
                score = 1e9 + 1e6 * (first_section.get(_page_of(docs[i]["location"])) == i) \
                    - 2e6 * (docs[i].get("boost", 1) < 1) - len(title)
                if score > best_score:
                    best, best_score = docs[i]["location"], score
                in_a_title = True
                for t in in_title:
                    found[t] = True
                extra[i][0].extend(w for w in heavy if not _pattern(w).search(title))
                extra[i][1].extend(w for w in words if w not in heavy and not _pattern(w).search(title + " " + text))
                continue
            count = sum(p.count(text) for p in pats.values())
            if count > best_score:
                best, best_score = docs[i]["location"], count
            if count:
                for t, p in pats.items():
                    found[t] = found[t] or p.search(text)
                page = _page_of(docs[i]["location"])
                per_page[page] = per_page.get(page, 0) + count * (0.5 if docs[i].get("boost", 1) < 1 else 1)
                missing = [w for w in words if not _pattern(w).search(text)]
                extra[i][1].extend(missing * min(count, 3))
        g["home"] = best
        if not in_a_title and per_page:
            home = max(per_page, key=lambda p: (per_page[p], p))
            i = first_section[home]
            g["home"] = docs[i]["location"]
            extra[i][0].extend(w for w in heavy if not _pattern(w).search(titles[i]))
        for term, ok in found.items():
            if not ok:
                problems.append(f"{g['file']}:{g['line']}: the term {term!r} appears on no page of the site, so "
                                f"searching {', '.join(repr(w) for w in words if w != term)} would not lead to it "
                                "(fix: write the term exactly as the pages write it, or remove it from `terms`; "
                                "a word readers type but the site does not use belongs in `aliases`)")
    for doc, (title_words, text_words) in zip(docs, extra):
        if title_words:
            doc["keywords"] = _segment(" ".join(dict.fromkeys(title_words)))
        if text_words:
            doc["related"] = _segment(" ".join(text_words))
    return problems


# ------------------------------------------------------------------ the no-hit suggestions
def suggestion_terms(docs: list[dict], groups: list[dict], glossary: list[dict]) -> dict:
    """search/terms.json: the words a no-hit search compares the query with, each with where it leads
    (a synonym group leads where apply_synonyms found its home)."""
    locations = {d["location"] for d in docs}
    for page in (GLOSSARY_PAGE, QUESTIONS_PAGE):
        if page not in locations:
            raise SearchDataError(f"the no-hit search suggestions link /{page}, which the site no longer has "
                                  "(fix: update GLOSSARY_PAGE / QUESTIONS_PAGE in tools/searchindex.py)")
    terms: dict[str, str] = {}
    seen: set[str] = set()

    def add(label: str, url: str) -> None:
        label = " ".join(label.replace("\u200b", "").split())
        if label and label.casefold() not in seen:
            seen.add(label.casefold())
            terms[label] = url

    for d in docs:
        if "#" not in d["location"]:  # a page: its title
            add(html.unescape(re.sub(r"<[^>]+>", "", d["title"])), d["location"])
    for g in groups:
        if g.get("home"):  # set by apply_synonyms
            for w in g["terms"] + g["aliases"]:
                add(w, g["home"])
    for t in glossary:
        for key in ("abbr", "en", "zh"):
            if t.get(key):
                add(str(t[key]), GLOSSARY_PAGE)
    return {"glossary": GLOSSARY_PAGE, "questions": QUESTIONS_PAGE, "terms": [[k, v] for k, v in terms.items()]}


# ------------------------------------------------------------------ after the index is written
def finalize(site_dir: Path, synonyms: Path = SYNONYMS) -> dict:
    """Add the synonym fields to search/search_index.json and write search/terms.json; returns figures
    for the build log. Raises SearchDataError (file, line, fix) on a synonym entry that leads nowhere."""
    index = site_dir / "search" / "search_index.json"
    if not index.exists():
        return {}
    data = json.loads(index.read_text(encoding="utf-8"))
    docs = data["docs"]
    separator = re.compile(data["config"]["separator"])
    for doc in docs:
        split_code(doc, separator)
    groups = load_synonyms(synonyms)
    fields = plain_fields(docs)  # before the synonym fields are added
    problems = apply_synonyms(docs, groups, fields, separator)
    if problems:
        raise SearchDataError("search synonyms that lead nowhere:\n" + "\n".join(problems))
    config_fields = data["config"].setdefault("fields", {})
    for name, boost in FIELDS.items():
        config_fields.setdefault(name, {"boost": boost})
    index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    glossary = yaml.safe_load(GLOSSARY.read_text(encoding="utf-8"))["terms"]
    terms = suggestion_terms(docs, groups, glossary)
    (site_dir / "search" / "terms.json").write_text(json.dumps(terms, ensure_ascii=False, separators=(",", ":")),
                                                    encoding="utf-8")
    return {"sections": len(docs), "synonym groups": len(groups), "suggestion terms": len(terms["terms"])}


# ------------------------------------------------------------------ the query side
# Material's worker segments each run of Chinese characters in a query against the index's words,
# but leaves it glued to Latin letters or digits next to it: `KV缓存` became the one term `kv缓存*`,
# which no page has (the index splits `KV缓存` into `kv` and `缓存`, as jieba's words are separated
# from their neighbours). A space goes between the two scripts first, as the index has it.
_HAN_QUERY = r'search(e){if(e=e.replace(new RegExp("\\p{sc=Han}+","gu"),'
_HAN_QUERY_FIX = (r'search(e){if(e=e.replace(new RegExp("(?<=[A-Za-z0-9])(?=\\p{sc=Han})|(?<=\\p{sc=Han})(?=[A-Za-z0-9])",'
                  r'"gu")," ").replace(new RegExp("\\p{sc=Han}+","gu"),')


def patch_worker(site_dir: Path) -> None:
    workers = sorted((site_dir / "assets" / "javascripts" / "workers").glob("search.*.min.js"))
    if len(workers) != 1:
        raise SearchDataError(f"expected one Material search worker, found {len(workers)} (fix: re-check "
                              "patch_worker in tools/searchindex.py)")
    text = workers[0].read_text(encoding="utf-8")
    if _HAN_QUERY_FIX in text:  # a dirty rebuild kept the patched copy
        return
    if text.count(_HAN_QUERY) != 1:
        raise SearchDataError("Material's search worker changed: a query mixing Chinese with Latin letters "
                              "(`KV缓存`) may no longer be split between the two (fix: check how the new worker "
                              "segments Chinese queries, then update or remove patch_worker in tools/searchindex.py)")
    workers[0].write_text(text.replace(_HAN_QUERY, _HAN_QUERY_FIX), encoding="utf-8")


# ------------------------------------------------------------------ measuring the index
_TEX_CMD = re.compile(r"\\[A-Za-z]{2,}")  # \ell, \mathrm; not a regex escape such as \p or \d


def formula_repeats(text: str) -> bool:
    """Whether an index section carries a formula's TeX source beside its rendering (the old triple
    form): a TeX command outside code and outside a lab's `$…$` (which is the only copy there)."""
    text = re.sub(r"<code>.*?</code>|<pre>.*?</pre>", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", text, flags=re.S)
    return bool(_TEX_CMD.search(text))


def measure(index: Path) -> dict:
    data = json.loads(index.read_text(encoding="utf-8"))
    docs = data["docs"]
    return {"bytes": index.stat().st_size, "sections": len(docs),
            "sections with a formula repeated": sum(formula_repeats(d.get("text", "")) for d in docs)}


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(arg, measure(Path(arg)))
