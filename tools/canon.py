"""The interview canon of every layer: data/canon/<field>.yml → coverage report and checks.

    python -m tools.canon            # covered/total per layer, then per field, then every uncovered topic with its reason
    python -m tools.canon check      # exit 1, naming file:line and the fix, on any error in data/canon/
    python -m tools.canon markdown   # the same report as a Markdown page (pages() gives it to the build)

Each file lists one field's canon: topics taken from the field's standard references (cppreference,
CS:APP, OSTEP, the RFCs and the Python reference for the foundations; PMPP, the CUDA guides and the
PyTorch custom-operator docs for the operator layer; ...), each with the page section that covers it
(`covered_by: docs-relative/path.md#anchor`, or a lab such as `operator/softmax-lab.ipynb`) or
`covered_by: null` and a `reason`. Top-level keys: `field` (the file's name), `layer` (one of LAYERS),
`title`, `sources`, `topics`, and optionally `minimum` (fewest topics the file may list; without it the
foundations fields keep their floors in MINIMUM and any other field needs DEFAULT_MINIMUM). A new field
needs only a new file. Anchors are computed from the page's headings exactly as the site does
(tools.questions.headings).
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
# The layers a canon can belong to: the stack top-down (docs/<layer>/), then the foundations.
LAYERS = ("algorithm", "framework", "operator", "compiler", "runtime", "driver", "hardware", "foundations")
# Floors of the foundations fields (issue 20): their files must exist, and a file's own `minimum` may not go lower.
MINIMUM = {"cpp": 40, "os": 40, "networking": 20, "python": 20}
DEFAULT_MINIMUM = 20  # any other field that declares no `minimum`
ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
TOP_KEYS = ("field", "layer", "title", "sources", "topics")
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
        return [f"{name}:1: the file must be a mapping with {', '.join(TOP_KEYS)} (fix: see data/canon/cpp.yml)"]
    errors: list[str] = []
    lines = data.get("__lines__", {})

    def at(key: str) -> int:
        return lines.get(key, data.get("__line__", 1))

    for key in TOP_KEYS:
        if key not in data:
            hint = f"`layer: <one of {', '.join(LAYERS)}>`" if key == "layer" else "it; see data/canon/cpp.yml"
            errors.append(f"{name}:1: missing top-level key `{key}` (fix: add {hint})")
    if errors:
        return errors
    field = data["field"]
    if field != path.stem:
        errors.append(f"{name}:{at('field')}: field {field!r} does not match the file name "
                      f"(fix: write `field: {path.stem}` or rename the file)")
    layer = data["layer"]
    if layer not in LAYERS:
        near = difflib.get_close_matches(str(layer), LAYERS, n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        errors.append(f"{name}:{at('layer')}: unknown layer {layer!r} "
                      f"(fix: one of {', '.join(LAYERS)}, the docs/<layer>/ chapter this canon measures{hint})")
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
    minimum, origin, problem = _minimum(data)
    if problem:
        errors.append(f"{name}:{at('minimum')}: {problem}")
    if len(topics) < minimum:
        fix = f"add {minimum - len(topics)} more topics from its sources"
        if origin == "the default":
            fix += f", or declare `minimum: <n>` at the top level if {field}'s references really have fewer topics"
        errors.append(f"{name}:{at('topics')}: {len(topics)} topics, fewer than the minimum {minimum} for {field} "
                      f"({origin}) (fix: {fix})")
    return errors


def _minimum(data: dict) -> tuple[int, str, str | None]:
    """(fewest topics the file must list, where that number comes from, a problem with `minimum:` or None)."""
    field, declared = data.get("field"), data.get("minimum")
    floor = MINIMUM.get(field)
    fallback = (floor, f"the floor for {field}") if floor else (DEFAULT_MINIMUM, "the default")
    if declared is None:
        return (*fallback, None)
    if isinstance(declared, bool) or not isinstance(declared, int) or declared < 1:
        return (*fallback, f"minimum {declared!r} is not a positive integer (fix: e.g. `minimum: {DEFAULT_MINIMUM}`, "
                           f"or remove the key to use {fallback[1]}, {fallback[0]})")
    if floor and declared < floor:
        return (floor, f"the floor for {field}", f"minimum {declared} is below the floor {floor} for {field} "
                                                 f"(fix: `minimum: {floor}` or higher, or remove the key)")
    return declared, "declared in the file", None


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
    """The well-formed canon files, ordered by layer (LAYERS, unknown layers last), then foundations' MINIMUM order, then name."""
    out = []
    for path in sorted(directory.glob("*.yml")):
        try:
            data = load(path)
        except yaml.YAMLError:
            continue  # check() reports it
        if isinstance(data, dict) and isinstance(data.get("topics"), list) and data.get("field"):
            out.append(data)
    order = list(MINIMUM)
    return sorted(out, key=lambda d: (LAYERS.index(d.get("layer")) if d.get("layer") in LAYERS else len(LAYERS),
                                      order.index(d["field"]) if d["field"] in order else len(order), str(d["field"])))


def _layers(directory: Path) -> list[tuple[str, list[dict]]]:
    """[(layer, its canon files)] in LAYERS order; a file without a valid layer is grouped under its raw value."""
    groups: dict[str, list[dict]] = {}
    for data in _fields(directory):
        groups.setdefault(str(data.get("layer")), []).append(data)
    return list(groups.items())


def _count(files: list[dict]) -> tuple[int, int]:
    """(covered, total) topics over some canon files."""
    topics = [t for d in files for t in d["topics"] if isinstance(t, dict)]
    return sum(1 for t in topics if t.get("covered_by")), len(topics)


def report(directory: Path = CANON) -> str:
    """Covered/total and share per layer (`[layer]` rows), each followed by its fields, then every uncovered topic."""
    width = 14

    def row(label: str, done: int, total: int) -> str:
        return f"{label:{width}s} {done:8d} {total:6d} {done / max(total, 1):6.0%}"

    lines = [f"{'field':{width}s} {'covered':>8s} {'total':>6s} {'share':>6s}"]
    uncovered = []
    layers = _layers(directory)
    for layer, files in layers:
        lines.append(row(f"[{layer}]", *_count(files)))
        for data in files:
            lines.append(row(str(data["field"]), *_count([data])))
            uncovered += [(data["field"], t) for t in data["topics"] if isinstance(t, dict) and not t.get("covered_by")]
    lines.append(row("all", *_count([d for _, files in layers for d in files])))
    if uncovered:
        lines += ["", f"uncovered ({len(uncovered)}):"]
        lines += [f"  [{f}] {t.get('id')}: {t.get('topic')} — {t.get('reason', '')}" for f, t in uncovered]
    return "\n".join(lines)


def _layer_title(layer: str) -> str:
    """The layer's name as its chapter's navigation gives it (docs/<layer>/.nav.yml `title:`), else the layer id."""
    nav = ROOT / "docs" / layer / ".nav.yml"
    try:
        title = (yaml.safe_load(nav.read_text(encoding="utf-8")) or {}).get("title") if nav.is_file() else None
    except yaml.YAMLError:
        title = None
    return str(title or layer)


def _share(done: int, total: int) -> str:
    return f"{done}/{total}（{done / max(total, 1):.0%}）"


PAGE = "foundations/canon.md"


def markdown(directory: Path = CANON) -> str:
    """A page listing the canon per layer, then per field; links are relative to the page at docs/PAGE."""
    base = PAGE.rsplit("/", 1)[0] + "/"
    layers = _layers(directory)
    out = ["---", "title: 面试题纲", "description: 各层与基础篇的面试题纲：每条出自该领域的标准参考，并链接到讲解它的小节；未覆盖的条目写明原因。",
           "tags:", "  - 面试", "---", "", "# 面试题纲", "",
           "每个领域的题纲取自该领域的标准参考（出处见各表的第二列），逐条对应到本站讲解它的小节。"
           "只有给出简短答案、并用推导、测量或代码讲清机制的小节才算覆盖，列表里的一次提及不算；"
           "未覆盖的条目写明原因：不属于这一层的范围，或者尚未写出。", "",
           "| 层 | 领域 | 覆盖 |", "|---|---|---|"]
    for layer, files in layers:
        for data in files:
            out.append(f"| {_layer_title(layer)} | {data['title']} | {_share(*_count([data]))} |")
    out.append(f"| 合计 | | {_share(*_count([d for _, files in layers for d in files]))} |")
    out.append("")
    for layer, files in layers:
        out += [f"## {_layer_title(layer)}", "", f"覆盖 {_share(*_count(files))}。", ""]
        for data in files:
            topics = [t for t in data["topics"] if isinstance(t, dict)]
            out += [f"### {data['title']}", "", f"覆盖 {_share(*_count([data]))}。", "",
                    "| 主题 | 出处 | 本站 |", "|---|---|---|"]
            sources = data.get("sources") if isinstance(data.get("sources"), dict) else {}
            for t in topics:
                src = sources.get(t.get("source"), {}) if isinstance(sources.get(t.get("source")), dict) else {}
                where = f"[{src.get('title', t.get('source'))}]({src.get('url', '')})，{t.get('where', '')}"
                cov = t.get("covered_by")
                if cov:
                    page, _, anchor = str(cov).partition("#")
                    label = headings(page).get(anchor, page) if anchor else page
                    cell = f"[{label}]({cov.removeprefix(base) if cov.startswith(base) else '../' + cov})"
                else:
                    cell = f"未覆盖：{t.get('reason', '')}"
                out.append(f"| {t.get('topic')} | {where} | {cell} |".replace("\n", " "))
            out.append("")
    return "\n".join(out)


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
