"""The project's own checks. Every problem names the file, the line when there is one, and the fix.

    python -m tools.checks source          # docs/ and notebooks/ as committed (fast, no build)
    python -m tools.checks site [SITE_DIR] # a built site: links, anchors, third-party hosts, search index
    python -m tools.checks fix             # rewrite Chinese–English typography with autocorrect

`make check` runs the first, `make test` runs both (through the tests). CONTRIBUTING.md lists
the rules these checks enforce.
"""
from __future__ import annotations

import json
import re
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import labs  # noqa: E402
from tools.labs import Problem, rel  # noqa: E402

DOCS = ROOT / "docs"
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*(?:\.[a-z0-9]+)*$")
NAME_EXEMPT = {".nav.yml"}
# Characters a reader cannot see or that look like others: zero-width, bidi controls, BOM,
# no-break and other odd spaces, soft hyphen, and full-width Latin letters and digits.
INVISIBLE = re.compile("[\u00a0\u00ad\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u2069\ufeff]")
CONFUSABLE = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")
REMOTE_IMG_MD = re.compile(r"!\[[^\]]*\]\(\s*<?((?:https?:)?//[^)\s>]+)")
REMOTE_IMG_HTML = re.compile(r"<img\b[^>]*\bsrc\s*=\s*[\"']((?:https?:)?//[^\"']+)", re.I)
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
# A snippet of a source file (pymdownx.snippets) that is not inside a fence is rendered as Markdown.
SNIPPET_CODE = re.compile(r'^\s*--8<--\s+"([^":]+\.(?:py|cu|c|cc|cpp|hpp|h|v|s|sh|txt))[":]')


# ----------------------------------------------------------------------------- source checks

def _front_matter(text: str) -> tuple[dict | None, int, str | None]:
    """(data, line count of the block, error). Line numbers in errors are 1-based file lines."""
    if not text.startswith("---\n"):
        return None, 0, "no front matter block (the file must start with a line '---')"
    end = text.find("\n---\n", 4)
    if end < 0:
        return None, 0, "the front matter block is not closed by a line '---'"
    block = text[4:end]
    try:
        data = yaml.safe_load(block) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark else 1
        return None, line, f"front matter is not valid YAML ({getattr(exc, 'problem', exc)})"
    if not isinstance(data, dict):
        return None, 1, "front matter must be a YAML mapping"
    return data, block.count("\n") + 2, None


def _key_line(text: str, key: str) -> int:
    """The line of a front-matter key ('tags') or of a list item ('  - 标签')."""
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith(f"{key}:") or (key.startswith("  - ") and line.strip() == key.strip()):
            return i
    return 1


def allowed_tags() -> list[str]:
    return yaml.safe_load((ROOT / "data" / "tags.yml").read_text(encoding="utf-8"))["tags"]


def check_front_matter(path: Path, text: str) -> list[Problem]:
    import jsonschema

    name = rel(path)
    data, err_line, err = _front_matter(text)
    if err and err_line:
        return [Problem(name, err_line, err, "fix the YAML syntax on that line (quote values that contain ':' or '[')")]
    if err:
        return [Problem(name, 1, err, "start the page with a block like:\n"
                        "    ---\n    title: 页面标题\n    description: 一句话说明本页内容\n    tags:\n      - 算子层\n    ---")]
    schema = json.loads((ROOT / "data" / "schemas" / "front-matter.json").read_text(encoding="utf-8"))
    tags = allowed_tags()
    schema["properties"]["tags"]["items"]["enum"] = tags
    problems = []
    for e in sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.path)):
        key = str(e.path[0]) if e.path else (e.message.split("'")[1] if "'" in e.message else "title")
        if e.validator == "enum" and e.path and e.path[0] == "tags":
            fix = f"use a tag from data/tags.yml ({', '.join(tags)}), or add the new tag there"
            msg = f"unknown tag {e.instance!r}"
            key = f"  - {e.instance}"
        elif e.validator == "required":
            msg, fix = f"front matter lacks {e.message.split()[0]}", "add it (see CONTRIBUTING.md, 规范 7)"
        elif e.validator == "additionalProperties":
            msg, fix = f"front matter has an unknown key: {e.message}", "remove it or document it in data/schemas/front-matter.json"
        else:
            msg = f"front matter '{'.'.join(map(str, e.path))}': {e.message}"
            fix = "follow data/schemas/front-matter.json (see CONTRIBUTING.md, 规范 7)"
        problems.append(Problem(name, _key_line(text, key), msg, fix))
    if data.get("title"):
        h1 = next((i for i, line in enumerate(text.splitlines(), 1) if line.startswith("# ")), None)
        if h1 is None:
            problems.append(Problem(name, None, "the page has no '# 标题' heading", f"add '# {data['title']}' after the front matter"))
        elif text.splitlines()[h1 - 1][2:].strip() != str(data["title"]).strip():
            problems.append(Problem(name, h1, f"the '# ' heading differs from the front matter title {data['title']!r}",
                                    "make them the same"))
    return problems


def check_names(root: Path) -> list[Problem]:
    problems = []
    for path in sorted(root.rglob("*")):
        if path.name in NAME_EXEMPT or any(p.startswith(".") and p not in NAME_EXEMPT for p in path.relative_to(root).parts):
            continue
        if not NAME_RE.match(path.name):
            fixed = re.sub(r"[^a-z0-9.]+", "-", path.name.lower()).strip("-")
            problems.append(Problem(rel(path), None, f"'{path.name}' is not a lowercase kebab-case name",
                                    f"rename it to '{fixed}' (and update links and .nav.yml)"))
    return problems


def _prose_lines(text: str):
    """(line number, line, in_code) for each line, tracking fenced code blocks."""
    fence = None
    for i, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(2)[0] * len(m.group(2))
            yield i, line, "open", m.group(3).strip()
            continue
        if m and fence and m.group(2).startswith(fence) and not m.group(3).strip():
            fence = None
            yield i, line, "close", ""
            continue
        yield i, line, "code" if fence else "prose", ""


def check_text(name: str, text: str, line_offset: int = 0) -> list[Problem]:
    """Invisible/confusable characters, remote images and unlabelled code fences in Markdown text."""
    problems = []
    for i, line, kind, info in _prose_lines(text):
        n = i + line_offset
        for m in INVISIBLE.finditer(line):
            ch = m.group()
            problems.append(Problem(name, n, f"invisible character U+{ord(ch):04X} "
                                    f"({unicodedata.name(ch, 'unnamed')}) at column {m.start() + 1}",
                                    "delete it (or type a plain space if a space was meant)"))
        if kind == "prose":
            for m in CONFUSABLE.finditer(line):
                ch = m.group()
                problems.append(Problem(name, n, f"full-width '{ch}' (U+{ord(ch):04X}) at column {m.start() + 1} looks like ASCII",
                                        f"type the ASCII character '{unicodedata.normalize('NFKC', ch)}'"))
            if "bench-pending:" in line:
                problems.append(Problem(name, n, "placeholder `bench-pending`: the page promises a GPU table that was never measured",
                                        "run `make bench` on that GPU, commit data/bench/<gpu>/<lab>.json and write `<!-- bench-table: gpu/section/lab -->`"))
            for m in (*REMOTE_IMG_MD.finditer(line), *REMOTE_IMG_HTML.finditer(line)):
                problems.append(Problem(name, n, f"remote image {m.group(1)}: a page must not load anything from another host",
                                        "download the image (or redraw it as SVG/Mermaid), commit it beside the page and link it relatively"))
            snippet = SNIPPET_CODE.match(line)
            if snippet:
                problems.append(Problem(name, n, f"`--8<-- \"{snippet.group(1)}…\"` outside a code block: the source is "
                                        "rendered as Markdown (`__init__` turns bold, indentation is lost)",
                                        "put the line inside a fence, e.g. ```python on the line before and ``` after"))
        if kind == "open" and not info:
            problems.append(Problem(name, n, "code block without a language",
                                    "name the language after the fence, e.g. ```python, ```cuda, ```cpp, ```bash or ```text"))
    return problems


def _autocorrect():
    import autocorrect_py

    if not getattr(_autocorrect, "loaded", False):
        autocorrect_py.load_config((ROOT / ".autocorrectrc").read_text(encoding="utf-8"))
        _autocorrect.loaded = True
    return autocorrect_py


def _window(old: str, new: str) -> tuple[str, str]:
    """The part of a long line around the first difference, for short messages."""
    start = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    lo = max(0, start - 12)
    return old[lo:start + 16].strip(), new[lo:start + 18].strip()


def check_typography(name: str, text: str, line_offset: int = 0) -> list[Problem]:
    """Chinese–English spacing and punctuation, by autocorrect (the tool the style guide names)."""
    result = _autocorrect().lint_for(text, name if name.endswith(".md") else name + ".md")
    problems = []
    for r in result.lines:
        old, new = _window(r.old, r.new)
        problems.append(Problem(name, r.line + line_offset, f"typography: '…{old}…'",
                                f"write '…{new}…' (CONTRIBUTING.md 规范 1–2; `make fix` rewrites it)"))
    return problems


def check_markdown(path: Path) -> list[Problem]:
    text = path.read_text(encoding="utf-8")
    name = rel(path)
    from tools import answer_boxes  # the "一句话答案" box: one or two sentences, ≤ 120 characters

    return [*check_front_matter(path, text), *check_text(name, text), *check_typography(name, text),
            *answer_boxes.check(path, text)]


def check_notebook(path: Path) -> list[Problem]:
    problems = labs.check_source(path)
    if any("not valid JSON" in p.message for p in problems):
        return problems
    for idx, cell in enumerate(labs.load(path).get("cells", []), 1):
        if cell.get("cell_type") != "markdown":
            continue
        src = labs._source(cell)
        where = f"{rel(path)} (cell {idx})"
        problems += check_text(where, src)
        problems += check_typography(where, src)
        for att in cell.get("attachments", {}) or {}:
            problems.append(Problem(where, None, f"attached image '{att}' is stored inside the notebook",
                                    "commit the image as a file beside the notebook and link it"))
    return problems


def check_sources() -> list[Problem]:
    problems = check_names(DOCS) + check_names(labs.NOTEBOOKS)
    for path in sorted(DOCS.rglob("*.md")):
        problems += check_markdown(path)
    for path in labs.iter_notebooks():
        problems += check_notebook(path)
    return problems


# ----------------------------------------------------------------------------- built-site checks

def _site_prefix() -> str:
    cfg = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    m = re.search(r"^site_url:.*?(https?://[^\s\"']+)", cfg, re.M)
    return urlparse(m.group(1)).path if m else "/"


def _source_of(site: Path, html: Path, root: Path) -> str:
    """The source file a built page came from (best effort), for messages."""
    page = html.relative_to(site).as_posix()
    stem = page.removesuffix("index.html").rstrip("/")
    for cand in (f"docs/{stem}.md", f"docs/{stem}/index.md", f"notebooks/{stem}.ipynb"):
        if (root / cand).exists():
            return cand.replace("//", "/")
    return f"site/{page}"


def _line_of(source: str, needle: str, root: Path = ROOT) -> int | None:
    path = root / source
    if not path.is_file() or not needle:
        return None
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return i
    return None


def check_site(site: Path, root: Path = ROOT) -> list[Problem]:
    """Links, anchors and third-party resources of a built site; `root` holds its sources."""
    from bs4 import BeautifulSoup

    prefix = _site_prefix()
    pages = sorted(site.rglob("*.html"))
    ids: dict[Path, set[str]] = {}
    soups = {}
    for page in pages:
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "lxml")
        soups[page] = soup
        ids[page] = {el["id"] for el in soup.find_all(id=True)} | {el["name"] for el in soup.find_all("a", attrs={"name": True})}

    problems: list[Problem] = []
    for page, soup in soups.items():
        source = _source_of(site, page, root)
        line_of = lambda needle, source=source: _line_of(source, needle, root)  # noqa: E731
        for tag, attr in (("a", "href"), ("link", "href"), ("img", "src"), ("script", "src"),
                          ("iframe", "src"), ("source", "src"), ("video", "src"), ("audio", "src")):
            for el in soup.find_all(tag, attrs={attr: True}):
                url = el[attr].strip()
                parsed = urlparse(url)
                if parsed.scheme in ("mailto", "javascript", "data", "tel"):
                    continue
                if parsed.scheme or url.startswith("//"):
                    if tag != "a" and not (tag == "link" and set(el.get("rel", [])) & {"canonical", "alternate"}):
                        problems.append(Problem(source, line_of(parsed.netloc), f"<{tag}> loads {url} from another host",
                                                "self-host the resource (see tools/hooks.py VENDOR) or remove it"))
                    continue
                path = unquote(parsed.path)
                if path.startswith("/"):
                    if not path.startswith(prefix):
                        problems.append(Problem(source, None, f"absolute link {url} is outside the site", "use a relative link"))
                        continue
                    target = site / path[len(prefix):]
                elif path:
                    target = (page.parent / path)
                else:
                    target = page
                if target.is_dir() or path.endswith("/") or not path:
                    target = target / "index.html" if target != page else page
                target = target.resolve()
                if not target.exists():
                    problems.append(Problem(source, line_of(Path(path.rstrip("/")).name),
                                            f"broken link: {url} (nothing at {target.relative_to(site.resolve()) if target.is_relative_to(site.resolve()) else target})",
                                            "point the link at an existing page (a relative link to its .md or .ipynb file)"))
                    continue
                frag = unquote(parsed.fragment)
                if frag and target.suffix == ".html" and frag not in ids.get(target, set()):
                    problems.append(Problem(source, line_of(f"#{frag}") or line_of(frag),
                                            f"broken anchor: {url} (no element with id '{frag}' in {target.relative_to(site.resolve()).as_posix()})",
                                            "link to a heading that exists; anchors are the heading text slugified (lowercase, spaces as '-')"))
    return problems


def check_search_index(site: Path) -> list[Problem]:
    index = site / "search" / "search_index.json"
    if not index.exists():
        return [Problem(f"site/{index.relative_to(site)}", None, "no search index was built", "enable the search plugin in mkdocs.yml")]
    docs = json.loads(index.read_text(encoding="utf-8"))["docs"]
    text = " ".join(d["title"] + " " + d["text"] for d in docs)
    if "\u200b" not in text:
        return [Problem("mkdocs.yml", _line_of("mkdocs.yml", "- search"),
                        "the search index holds no jieba-segmented Chinese (no U+200B word breaks)",
                        "install jieba (it is in requirements.txt) and keep theme.language: zh")]
    return []


def fix_typography() -> list[str]:
    """Rewrite Markdown pages and notebook Markdown cells with autocorrect; returns changed files."""
    ac = _autocorrect()
    changed = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        new = ac.format_for(text, path.name)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(rel(path))
    for path in labs.iter_notebooks():
        nb = labs.load(path)
        dirty = False
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "markdown":
                src = labs._source(cell)
                new = ac.format_for(src, "cell.md")
                if new != src:
                    cell["source"], dirty = new, True
        if dirty:
            path.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            changed.append(rel(path))
    return changed


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "source"
    if cmd == "fix":
        for name in fix_typography():
            print(f"rewrote {name}")
        return 0
    if cmd == "source":
        problems = check_sources()
    elif cmd == "site":
        site = Path(argv[1]) if len(argv) > 1 else ROOT / "site"
        problems = check_site(site) + check_search_index(site)
    else:
        print(__doc__)
        return 2
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)" if problems else f"{cmd} checks: no problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
