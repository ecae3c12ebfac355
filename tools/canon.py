"""The interview canon of the foundations chapters: data/canon/<field>.yml → coverage report and checks.

    python -m tools.canon            # covered/total per field, then every uncovered topic with its reason
    python -m tools.canon check      # exit 1, naming file:line and the fix, on any error in data/canon/
    python -m tools.canon markdown   # the same report as a Markdown page (pages() gives it to the build)

Each file lists one field's canon: topics taken from primary references (cppreference, Effective Modern
C++, CS:APP, OSTEP, Kurose & Ross, the RFCs, the Python reference), each with the page section that
covers it (`covered_by: docs-relative/path.md#anchor`) or `covered_by: null` and a `reason`.
Anchors are computed from the page's headings exactly as the site does (tools.questions.headings).
"""
from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import yaml

from tools.questions import headings

ROOT = Path(__file__).resolve().parents[1]
CANON = ROOT / "data" / "canon"
MINIMUM = {"cpp": 40, "os": 40, "networking": 20, "python": 20}  # topics per field (issue 20)
ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TOPIC_KEYS = ("id", "topic", "source", "where", "covered_by")


class _Loader(yaml.SafeLoader):
    """SafeLoader that records, for every mapping, its own line and the line of each key."""


def _mapping(loader: _Loader, node: yaml.MappingNode) -> dict:
    loader.flatten_mapping(node)
    out = {}
    lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[key] = loader.construct_object(value_node, deep=True)
        lines[key] = key_node.start_mark.line + 1
    out["__line__"] = node.start_mark.line + 1
    out["__lines__"] = lines
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def load(path: Path) -> dict:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)


def _page_exists(page: str) -> bool:
    base = ROOT / ("notebooks" if page.endswith(".ipynb") else "docs")
    return (base / page).is_file()


def check_file(path: Path) -> list[str]:
    """Every problem of one canon file, as `file:line: what (fix: how)`."""
    name = _rel(path)
    try:
        data = load(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        return [f"{name}:{line}: not valid YAML: {getattr(exc, 'problem', exc)} (fix: correct the YAML syntax)"]
    if not isinstance(data, dict):
        return [f"{name}:1: the file must be a mapping with field, title, sources, topics (fix: see data/canon/cpp.yml)"]
    errors: list[str] = []
    lines = data.get("__lines__", {})

    def at(key: str) -> int:
        return lines.get(key, data.get("__line__", 1))

    for key in ("field", "title", "sources", "topics"):
        if key not in data:
            errors.append(f"{name}:1: missing top-level key `{key}` (fix: add it; see data/canon/cpp.yml)")
    if errors:
        return errors
    field = data["field"]
    if field != path.stem:
        errors.append(f"{name}:{at('field')}: field {field!r} does not match the file name "
                      f"(fix: write `field: {path.stem}` or rename the file)")
    sources = data["sources"] if isinstance(data["sources"], dict) else {}
    for key, src in sources.items():
        if key in ("__line__", "__lines__"):
            continue
        line = sources["__lines__"].get(key, at("sources"))
        if not isinstance(src, dict) or not src.get("title") or not src.get("url"):
            errors.append(f"{name}:{line}: source {key!r} needs a title and a url (fix: `{key}: {{title: \"…\", url: \"https://…\"}}`)")
        elif not str(src["url"]).startswith("https://"):
            errors.append(f"{name}:{line}: source {key!r} has a url that is not https (fix: link the primary source over https)")
    known = sorted(k for k in sources if not k.startswith("__"))
    topics = data["topics"] if isinstance(data["topics"], list) else []
    if not isinstance(data["topics"], list):
        errors.append(f"{name}:{at('topics')}: `topics` must be a list (fix: write each topic as `- id: …`)")
    seen: dict[str, int] = {}
    for t in topics:
        if not isinstance(t, dict):
            errors.append(f"{name}:{at('topics')}: each topic must be a mapping (fix: see data/canon/cpp.yml)")
            continue
        tl = t["__lines__"]
        line = t["__line__"]
        missing = [k for k in TOPIC_KEYS if k not in t]
        if missing:
            errors.append(f"{name}:{line}: topic {t.get('id', '?')!r} lacks {', '.join(missing)} "
                          f"(fix: every topic has {', '.join(TOPIC_KEYS)})")
            continue
        tid = str(t["id"])
        if not ID.match(tid):
            errors.append(f"{name}:{tl['id']}: id {tid!r} is not lowercase words joined by hyphens (fix: e.g. `move-semantics`)")
        if tid in seen:
            errors.append(f"{name}:{tl['id']}: duplicate id {tid!r}, first used on line {seen[tid]} (fix: give each topic its own id)")
        else:
            seen[tid] = tl["id"]
        if t["source"] not in sources or str(t["source"]).startswith("__"):
            errors.append(f"{name}:{tl['source']}: topic {tid!r} names unknown source {t['source']!r} "
                          f"(fix: add it under `sources:` or use one of {known})")
        if not t.get("topic") or not t.get("where"):
            errors.append(f"{name}:{line}: topic {tid!r} has an empty topic or where (fix: name the topic and the chapter/section of its source)")
        cov = t["covered_by"]
        if cov is None:
            if not str(t.get("reason") or "").strip():
                errors.append(f"{name}:{tl['covered_by']}: topic {tid!r} is uncovered but gives no reason "
                              f"(fix: add `reason: \"…\"` saying why, or point covered_by at the section that covers it)")
            continue
        page, _, anchor = str(cov).partition("#")
        if not _page_exists(page):
            errors.append(f"{name}:{tl['covered_by']}: topic {tid!r}: page {page!r} does not exist "
                          f"(fix: a path relative to docs/, e.g. foundations/cpp/memory.md#anchor)")
        elif anchor and anchor not in headings(page):
            near = difflib.get_close_matches(anchor, list(headings(page)), n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else f"; anchors there: {sorted(headings(page))[:8]}"
            errors.append(f"{name}:{tl['covered_by']}: topic {tid!r}: no heading with anchor {anchor!r} in {page} "
                          f"(fix: use the slug of an existing heading{hint})")
    minimum = MINIMUM.get(field)
    if minimum is None:
        errors.append(f"{name}:{at('field')}: unknown field {field!r} (fix: one of {sorted(MINIMUM)}, or add it to MINIMUM in tools/canon.py)")
    elif len(topics) < minimum:
        errors.append(f"{name}:{at('topics')}: {len(topics)} topics, fewer than the minimum {minimum} for {field} "
                      f"(fix: add {minimum - len(topics)} more topics from its sources)")
    return errors


def check(directory: Path = CANON) -> list[str]:
    errors = []
    for field in MINIMUM:
        if not (directory / f"{field}.yml").is_file():
            errors.append(f"{_rel(directory / (field + '.yml'))}:1: missing canon file for {field} "
                          f"(fix: create it in the format of data/canon/cpp.yml)")
    for path in sorted(directory.glob("*.yml")):
        errors += check_file(path)
    return errors


def _fields(directory: Path) -> list[dict]:
    out = []
    for path in sorted(directory.glob("*.yml"), key=lambda p: list(MINIMUM).index(p.stem) if p.stem in MINIMUM else 99):
        data = load(path)
        if isinstance(data, dict) and isinstance(data.get("topics"), list):
            out.append(data)
    return out


def report(directory: Path = CANON) -> str:
    lines = [f"{'field':12s} {'covered':>8s} {'total':>6s} {'share':>6s}"]
    fields = _fields(directory)
    uncovered = []
    for data in fields:
        topics = data["topics"]
        done = sum(1 for t in topics if t.get("covered_by"))
        lines.append(f"{data['field']:12s} {done:8d} {len(topics):6d} {done / max(len(topics), 1):6.0%}")
        uncovered += [(data["field"], t) for t in topics if not t.get("covered_by")]
    total = sum(len(d["topics"]) for d in fields)
    done = sum(1 for d in fields for t in d["topics"] if t.get("covered_by"))
    lines.append(f"{'all':12s} {done:8d} {total:6d} {done / max(total, 1):6.0%}")
    if uncovered:
        lines += ["", f"uncovered ({len(uncovered)}):"]
        lines += [f"  [{f}] {t['id']}: {t['topic']} — {t.get('reason', '')}" for f, t in uncovered]
    return "\n".join(lines)


def markdown(directory: Path = CANON) -> str:
    """A page listing the canon per field; links are relative to a page at docs/foundations/canon.md."""
    out = ["---", "title: 基础篇面试题纲", "description: C++、操作系统、计算机网络与 Python 的面试题纲，每条出自一手参考，并链接到讲解它的小节。",
           "tags:", "  - 面试", "---", "", "# 基础篇面试题纲", "", "每个领域的题纲取自一手参考（cppreference、Effective Modern C++、CS:APP、OSTEP、"
           "Computer Networking: A Top-Down Approach、RFC、Python 语言参考与 CPython 开发者指南），"
           "逐条对应到本站讲解它的小节；未覆盖的条目写明原因。", ""]
    for data in _fields(directory):
        topics = data["topics"]
        done = sum(1 for t in topics if t.get("covered_by"))
        out += [f"## {data['title']}", "", f"覆盖 {done}/{len(topics)}。", "", "| 主题 | 出处 | 本站 |", "|---|---|---|"]
        for t in topics:
            src = data["sources"].get(t["source"], {})
            where = f"[{src.get('title', t['source'])}]({src.get('url', '')})，{t['where']}"
            if t.get("covered_by"):
                page, _, anchor = t["covered_by"].partition("#")
                label = headings(page).get(anchor, page) if anchor else page
                cov = t["covered_by"]
                cell = f"[{label}]({cov.removeprefix('foundations/') if cov.startswith('foundations/') else '../' + cov})"
            else:
                cell = f"未覆盖：{t.get('reason', '')}"
            out.append(f"| {t['topic']} | {where} | {cell} |".replace("\n", " "))
        out.append("")
    return "\n".join(out)


PAGE = "foundations/canon.md"


def pages(directory: Path = CANON) -> dict[str, str]:
    """The generated page, keyed by its path under docs/ (for tools/hooks.py, like tools.questions.pages)."""
    return {PAGE: markdown(directory)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        errors = check()
        for e in errors:
            print(e)
        if not errors:
            print(f"data/canon: {sum(len(d['topics']) for d in _fields(CANON))} topics, all checks pass")
        return 1 if errors else 0
    if argv[:1] == ["markdown"]:
        print(markdown())
        return 0
    if argv:
        print(__doc__)
        return 2
    print(report())
    errors = check()
    if errors:
        print(f"\n{len(errors)} problem(s); run `python -m tools.canon check` for details")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
