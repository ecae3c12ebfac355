"""The "一句话答案" box: one or two sentences, at most about 120 characters (CONTRIBUTING.md 规范 8).

A page opens with `!!! abstract "一句话答案"`: the answer an interviewer wants first. The detail
belongs in the page below it. This module measures every such box the way a reader sees it and
reports the boxes that are too long or hold more than two sentences.

How characters are counted (the rendered text, not the Markdown source):

* A character counts when it is a letter or a digit in Unicode's sense: every CJK character,
  every Latin or Greek letter, every digit (``H200`` is 4, ``cudaMalloc`` is 10).
  Spaces, punctuation (，。：“”() …) and symbols (+ = → ×) do not count.
* Markup counts only as what it renders: ``**粗体**`` is 2, a link ``[文字](url)`` counts its
  text and not its address, HTML tags, comments and attribute lists ``{ #id }`` count nothing.
* Inline code counts like text: the letters and digits between the backticks.
* Math counts what it draws: a letter or digit is 1, a symbol command (``\\alpha``, ``\\ell``,
  ``\\sum``) is 1, an operator name (``\\log``, ``\\max``, ``\\exp``) is its letters, layout commands
  (``\\frac``, ``\\text``, ``\\mathrm``, ``\\left`` …) are 0 and their arguments count as above.
  ``$\\Theta(N^2 d^2 / M)$`` is 6.
* A build-time figure (``{{record …}}``, ``{{bench …}}``) counts 3, the length of a typical
  rendered number.

Limits: 120 characters; 140 for a box that holds a formula (math takes more room to say the
same thing, and the formula is usually the answer). At most two sentences: a sentence ends with
。！？ outside code and math.

    python -m tools.answer_boxes            # every page's box: count, limit, sentences
    python -m tools.answer_boxes --check    # only the problems (what `tools.checks source` runs)
"""
from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.labs import Problem, rel  # noqa: E402

LIMIT = 120
LIMIT_MATH = 140
MAX_SENTENCES = 2
BOX = re.compile(r'^(?P<indent>[ \t]*)!!!\s+abstract\s+"一句话答案"\s*$')
MESSAGE = ("the answer box has {n} characters (limit {limit}): keep the one- or two-sentence answer "
           "in the box and move the rest into the page")
SENTENCE_MESSAGE = ("the answer box has {n} sentences (limit 2): keep the one- or two-sentence answer "
                    "in the box and move the rest into the page")
FIX = ("CONTRIBUTING.md 规范 8: letters, digits and CJK characters of the rendered text count; "
       "`python -m tools.answer_boxes` prints every box's count")

# TeX commands that draw nothing themselves (their arguments are counted).
TEX_LAYOUT = {
    "frac", "dfrac", "tfrac", "cfrac", "sqrt", "text", "textrm", "textit", "textbf", "texttt", "mathrm",
    "mathbf", "mathit", "mathcal", "mathbb", "mathsf", "mathtt", "mathfrak", "boldsymbol", "bm",
    "operatorname", "left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
    "middle", "quad", "qquad", "displaystyle", "textstyle", "scriptstyle", "limits", "nolimits",
    "hat", "widehat", "bar", "overline", "underline", "tilde", "widetilde", "vec", "dot", "ddot",
    "underbrace", "overbrace", "underset", "overset", "stackrel", "mathop", "rm", "bf", "it",
    "begin", "end", "color", "phantom", "hspace", "mkern", "kern", "tag", "lceil", "rceil",
    "lfloor", "rfloor", "langle", "rangle", "lvert", "rvert", "vert", "mid", "cdot", "cdots",
    "ldots", "dots", "times", "to", "leq", "le", "geq", "ge", "neq", "ne", "approx", "sim",
    "equiv", "propto", "in", "notin", "subset", "subseteq", "cup", "cap", "pm", "mp", "div",
    "rightarrow", "leftarrow", "Rightarrow", "Leftarrow", "mapsto", "gets", "succ", "prec",
    "succeq", "preceq", "ll", "gg", "circ", "ast", "star", "oplus", "otimes", "odot", "top",
    "prime", "colon", "lbrace", "rbrace", "backslash",
}
# Symbols-as-operators (\times, \leq …) are in TEX_LAYOUT: like + and = they do not count.
# Operator names render as their letters.
TEX_NAMES = {"log", "ln", "exp", "max", "min", "sin", "cos", "tan", "tanh", "lim", "sup", "inf", "arg",
             "det", "Pr", "argmax", "argmin", "softmax", "gcd", "dim", "ker", "deg", "mod", "bmod", "pmod"}

MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\s)(.+?)(?<![\s\\])\$(?!\d)|\\\((.+?)\\\)", re.S)
CODE = re.compile(r"(`+)(.+?)\1", re.S)
TOKEN = re.compile(r"\{\{\s*(?:record|bench)\b.*?\}\}", re.S)
LINK = re.compile(r"!?\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])")
FOOTNOTE = re.compile(r"\[\^[^\]]+\]")
HTML = re.compile(r"<!--.*?-->|</?[A-Za-z][^>]*>", re.S)
ATTR = re.compile(r"\{:?\s*[#.][^}]*\}")
SENTENCE_END = re.compile(r"[。！？]+")


def counts(ch: str) -> bool:
    """A letter or a digit (every CJK character is a letter, Lo)."""
    return unicodedata.category(ch)[0] in "LN"


def math_length(tex: str) -> int:
    """Characters a formula draws: letters, digits, symbol commands; not layout or operators."""
    n = 0
    for m in re.finditer(r"\\([A-Za-z]+)|\\.|(.)", tex, re.S):
        name, ch = m.group(1), m.group(2)
        if name:
            if name in TEX_NAMES:
                n += len(name)
            elif name not in TEX_LAYOUT:
                n += 1          # \alpha, \ell, \Theta, \sum, \infty … draw one glyph
        elif ch and counts(ch):
            n += 1
    return n


@dataclass
class Box:
    path: str
    line: int           # the line of `!!! abstract "一句话答案"`
    source: str         # the box's Markdown, dedented
    chars: int
    sentences: int
    has_math: bool

    @property
    def limit(self) -> int:
        return LIMIT_MATH if self.has_math else LIMIT


def measure(markdown: str) -> tuple[int, int, bool]:
    """(characters, sentences, has_math) of a box's Markdown."""
    text = TOKEN.sub("000", HTML.sub("", markdown))
    n = 0
    has_math = False
    prose: list[str] = []
    pos = 0
    # Code first (a `$` between backticks is code), then math in what is left, then prose.
    segments: list[tuple[bool, str]] = []
    for m in CODE.finditer(text):
        segments += [(False, text[pos:m.start()]), (True, m.group(2))]
        pos = m.end()
    segments.append((False, text[pos:]))
    for is_code, seg in segments:
        if is_code:
            n += sum(counts(c) for c in seg)
            prose.append("\0")          # a placeholder that counts nothing
            continue
        for m in MATH.finditer(seg):
            n += math_length(next(g for g in m.groups() if g is not None))
            has_math = True
        prose.append(MATH.sub("\0", seg))
    plain = ATTR.sub("", FOOTNOTE.sub("", LINK.sub(lambda m: m.group(1), "".join(prose))))
    n += sum(counts(c) for c in plain)
    parts = SENTENCE_END.split(plain)
    sentences = len(parts) - 1 + (1 if any(counts(c) for c in parts[-1]) else 0)
    return n, sentences, has_math


def boxes(path: Path, text: str | None = None) -> list[Box]:
    """Every "一句话答案" box of a Markdown page, with its measure."""
    text = path.read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = BOX.match(line)
        if not m:
            continue
        indent = len(m.group("indent").expandtabs(4))
        body: list[str] = []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt.expandtabs(4)) - len(nxt.expandtabs(4).lstrip()) <= indent:
                break
            body.append(nxt)
        while body and not body[-1].strip():
            body.pop()
        width = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        source = "\n".join(b[width:] for b in body)
        chars, sentences, has_math = measure(source)
        found.append(Box(rel(path), i + 1, source, chars, sentences, has_math))
    return found


def check(path: Path, text: str | None = None) -> list[Problem]:
    problems = []
    for box in boxes(path, text):
        if box.chars > box.limit:
            problems.append(Problem(box.path, box.line, MESSAGE.format(n=box.chars, limit=box.limit), FIX))
        elif box.sentences > MAX_SENTENCES:
            problems.append(Problem(box.path, box.line, SENTENCE_MESSAGE.format(n=box.sentences), FIX))
    return problems


def main(argv: list[str]) -> int:
    only_problems = "--check" in argv
    paths = [Path(a) for a in argv if not a.startswith("--")] or sorted((ROOT / "docs").rglob("*.md"))
    files: list[Path] = []
    for p in paths:
        files += sorted(p.rglob("*.md")) if p.is_dir() else [p]
    problems: list[Problem] = []
    sizes = []
    for path in files:
        for box in boxes(path):
            sizes.append(box.chars)
            if not only_problems:
                flag = "" if box.chars <= box.limit and box.sentences <= MAX_SENTENCES else "  <-- too long"
                print(f"{box.path}:{box.line}: {box.chars}/{box.limit} chars, {box.sentences} sentence(s){flag}")
        problems += check(path)
    if only_problems:
        for p in problems:
            print(p)
    if sizes:
        s = sorted(sizes)
        median = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
        print(f"{len(s)} box(es): median {median} chars, max {s[-1]}; {len(problems)} over the limit")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
