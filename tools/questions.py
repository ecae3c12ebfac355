"""The question bank: data/questions.yml → generated pages and a coverage report.

    python -m tools.questions coverage   # `make coverage`: answered/total per layer, unanswered questions

The build (tools/hooks.py) calls pages() to add two generated pages under interview/; MkDocs then
validates every answer link and anchor like any other link.
"""
from __future__ import annotations

import functools
import json
import sys
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BANK = ROOT / "data" / "questions.yml"
SCHEMA = ROOT / "data" / "schemas" / "questions.json"
LAYERS = {  # the order of the stack, then the foundations
    "stack": "七层全景", "algorithm": "算法层", "framework": "框架层", "operator": "算子层", "compiler": "编译层",
    "runtime": "运行时层", "driver": "驱动层", "hardware": "硬件层", "foundations/cpp": "C++",
    "foundations/os": "操作系统", "foundations/networking": "计算机网络", "foundations/python": "Python",
    "foundations/algorithms": "数据结构与算法",
}
PAGES = {"by-layer": "interview/questions-by-layer.md", "by-source": "interview/questions-by-source.md"}


class BankError(ValueError):
    pass


def load() -> dict:
    import jsonschema

    data = yaml.safe_load(BANK.read_text(encoding="utf-8"))
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(map(str, e.path))
        raise BankError(f"data/questions.yml: {where}: {e.message} (fix: follow data/schemas/questions.json)")
    seen = set()
    for q in data["questions"]:
        if q["id"] in seen:
            raise BankError(f"data/questions.yml: duplicate id {q['id']!r} (fix: give each question its own id)")
        seen.add(q["id"])
        if q["source"] not in data["sources"]:
            raise BankError(f"data/questions.yml: question {q['id']!r} names unknown source {q['source']!r} "
                            f"(fix: add it under `sources:` or use one of {sorted(data['sources'])})")
    return data


@functools.lru_cache(maxsize=None)
def headings(page: str) -> dict[str, str]:
    """anchor → heading text of a page under docs/ (or a lab), with the site's slug function."""
    import re

    from pymdownx.slugs import slugify

    slug = slugify(case="lower")
    path = ROOT / "docs" / page
    if page.endswith(".ipynb"):
        nb = json.loads((ROOT / "notebooks" / page).read_text(encoding="utf-8"))
        text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    else:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    out: dict[str, str] = {}
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        m = None if fence else re.match(r"^(#{1,6})\s+(.+?)\s*#*$", line)
        if m:
            title = re.sub(r"\{[^}]*\}$", "", m.group(2)).strip()
            plain = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda g: g.group(1) or "", title)
            anchor = slug(plain, "-")
            base, n = anchor, 1
            while anchor in out:
                anchor, n = f"{base}_{n}", n + 1
            out[anchor] = plain
    return out


def _answer_cell(q: dict) -> str:
    if not q["answer"]:
        return "尚无答案页"
    page, _, anchor = q["answer"].partition("#")
    layer = next((name for key, name in LAYERS.items() if page.startswith(key + "/")), "首页")
    heading = headings(page).get(anchor, anchor)
    return f"[{layer} · {heading}](../{page}#{anchor})"


def _row(q: dict, other: str) -> str:
    text = q["q"].replace("|", "\\|")
    return f"| {text} | {other} | {_answer_cell(q)} |"


def pages(data: dict) -> dict[str, str]:
    """Markdown of the generated pages, keyed by their path under docs/."""
    qs = data["questions"]
    total, answered = len(qs), sum(1 for q in qs if q["answer"])
    intro = (f"题库收录笔记中的全部 {total} 道面试题、学习清单条目与岗位要求，其中 {answered} 道链接到回答它的小节；"
             f"“尚无答案页”表示讲解它的章节还没有写到，不给凑数的答案。数据在仓库的 `data/questions.yml`，"
             f"`make coverage` 打印各层的覆盖率。")
    by_layer = [
        "---", "title: 题库：按层", "description: 笔记中的全部面试题按七层与基础分组，每题链接到回答它的小节。",
        "tags:", "  - 面试", "---", "", "# 题库：按层", "", intro, "",
    ]
    grouped = defaultdict(list)
    for q in qs:
        grouped[q["layer"]].append(q)
    for key, name in LAYERS.items():
        items = grouped.get(key, [])
        if not items:
            continue
        done = sum(1 for q in items if q["answer"])
        by_layer += [f"## {name}", "", f"{done} / {len(items)} 道有答案。", "", "| 题目 | 出处 | 答案 |", "|---|---|---|"]
        by_layer += [_row(q, data["sources"][q["source"]]["title"]) for q in items]
        by_layer.append("")
    by_source = [
        "---", "title: 题库：按出处", "description: 笔记中的全部面试题按公司轮次、学习清单与岗位要求分组。",
        "tags:", "  - 面试", "---", "", "# 题库：按出处", "", intro, "",
    ]
    for key, src in data["sources"].items():
        items = [q for q in qs if q["source"] == key]
        if not items:
            continue
        by_source += [f"## {src['title']}", "", f"{src['kind']}，{len(items)} 道。", "",
                      "| 题目 | 所属 | 答案 |", "|---|---|---|"]
        by_source += [_row(q, LAYERS[q["layer"]]) for q in items]
        by_source.append("")
    return {PAGES["by-layer"]: "\n".join(by_layer), PAGES["by-source"]: "\n".join(by_source)}


def coverage(data: dict) -> str:
    lines = [f"{'layer':26s} {'answered':>8s} {'total':>6s} {'share':>6s}"]
    grouped = defaultdict(list)
    for q in data["questions"]:
        grouped[q["layer"]].append(q)
    for key in LAYERS:
        items = grouped.get(key, [])
        if items:
            done = sum(1 for q in items if q["answer"])
            lines.append(f"{key:26s} {done:8d} {len(items):6d} {done / len(items):6.0%}")
    total = len(data["questions"])
    done = sum(1 for q in data["questions"] if q["answer"])
    lines.append(f"{'all':26s} {done:8d} {total:6d} {done / total:6.0%}")
    missing = [q for q in data["questions"] if not q["answer"]]
    if missing:
        lines += ["", f"unanswered ({len(missing)}):"]
        lines += [f"  [{q['layer']}] {q['id']}: {q['q']}" for q in missing]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] != ["coverage"]:
        print(__doc__)
        return 2
    try:
        print(coverage(load()))
    except BankError as exc:
        print(exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
