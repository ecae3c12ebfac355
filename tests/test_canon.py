"""The foundations canon (data/canon/*.yml, tools/canon.py): the real data passes, and each error is reported.

Every error must name the file and the line of the offending entry and say how to fix it, so the bad
fixtures below are small files in tmp_path whose line numbers are known.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from tools import canon


def test_real_canon_passes_check():
    errors = canon.check()
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("field,minimum", sorted(canon.MINIMUM.items()))
def test_minimums_hold(field, minimum):
    assert minimum >= {"cpp": 40, "os": 40, "networking": 20, "python": 20}[field]
    data = canon.load(canon.CANON / f"{field}.yml")
    assert len(data["topics"]) >= minimum
    for t in data["topics"]:
        assert t["source"] in data["sources"]
        assert t["covered_by"] or t["reason"].strip()


def test_report_and_cli():
    text = canon.report()
    for field in canon.MINIMUM:
        assert re.search(rf"^{field}\s+\d+\s+\d+\s+\d+%$", text, re.M), text
    proc = subprocess.run([sys.executable, "-m", "tools.canon", "check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = canon.pages()[canon.PAGE]
    assert page.startswith("---\ntitle: 基础篇面试题纲\n")
    assert page.count("| 主题 | 出处 | 本站 |") == len(canon.MINIMUM)
    # every link of the generated page (relative to docs/foundations/) lands on an existing heading
    from tools.questions import headings

    links = re.findall(r"\]\(((?!https?:)[^)#]+\.md)#([^)]+)\)", page)
    assert len(links) >= 80
    for rel, anchor in links:
        target = (ROOT / "docs" / "foundations" / rel).resolve().relative_to(ROOT / "docs").as_posix()
        assert anchor in headings(target), (rel, anchor)


def write(directory, name: str, topics: str, *, field: str | None = None, extra_sources: str = "") -> "Path":
    """A canon file whose first topic starts on line 7."""
    field = field or name.removesuffix(".yml")
    body = textwrap.dedent(f"""\
        field: {field}
        title: Test
        sources:
          cppref: {{title: "cppreference", url: "https://en.cppreference.com/w/"}}
        {extra_sources}
        topics:
        """) + textwrap.dedent(topics)
    path = directory / name
    path.write_text(body, encoding="utf-8")
    return path


GOOD = """\
  - id: good-topic
    topic: 好的条目
    source: cppref
    where: "Somewhere"
    covered_by: foundations/cpp/memory.md#堆与栈
"""


def padding(n: int, start: int = 0) -> str:
    return "".join(f"""\
  - id: pad-{i}
    topic: 填充
    source: cppref
    where: "x"
    covered_by: null
    reason: "fixture"
""" for i in range(start, start + n))


def only(errors: list[str]) -> str:
    assert len(errors) == 1, errors
    return errors[0]


def test_fixture_without_errors_passes(tmp_path):
    path = write(tmp_path, "networking.yml", GOOD + padding(19))
    assert canon.check_file(path) == []


def test_unknown_source(tmp_path):
    path = write(tmp_path, "networking.yml", GOOD.replace("source: cppref", "source: nosuch") + padding(19))
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:9: ") and "unknown source 'nosuch'" in e and "fix:" in e


def test_duplicate_id(tmp_path):
    path = write(tmp_path, "networking.yml", GOOD + GOOD + padding(18))
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:12: ") and "duplicate id 'good-topic'" in e and "line 7" in e


def test_missing_page(tmp_path):
    path = write(tmp_path, "networking.yml", GOOD.replace("cpp/memory.md", "cpp/no-such-page.md") + padding(19))
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:11: ") and "does not exist" in e


def test_missing_anchor(tmp_path):
    path = write(tmp_path, "networking.yml", GOOD.replace("#堆与栈", "#堆与栈的区别") + padding(19))
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:11: ") and "no heading with anchor '堆与栈的区别'" in e and "did you mean" in e


def test_anchor_of_duplicate_heading(tmp_path, monkeypatch):
    """Equal headings get `_1`, `_2` as Python-Markdown's toc gives them (checked against markdown itself)."""
    import markdown
    from pymdownx.slugs import slugify

    from tools import questions

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "dup.md").write_text("# 页\n\n## 同名 `x`\n\n## 同名 `x`\n\n## 同名 `x`\n", encoding="utf-8")
    md = markdown.Markdown(extensions=["toc"], extension_configs={"toc": {"slugify": slugify(case="lower")}})
    html = md.convert((tmp_path / "docs" / "dup.md").read_text(encoding="utf-8"))
    assert re.findall(r'id="([^"]+)"', html) == ["页", "同名-x", "同名-x_1", "同名-x_2"]
    monkeypatch.setattr(questions, "ROOT", tmp_path)
    monkeypatch.setattr(canon, "ROOT", tmp_path)
    questions.headings.cache_clear()
    try:
        good = write(tmp_path, "networking.yml", GOOD.replace("foundations/cpp/memory.md#堆与栈", "dup.md#同名-x_2") + padding(19))
        assert canon.check_file(good) == []
        bad = write(tmp_path, "networking.yml", GOOD.replace("foundations/cpp/memory.md#堆与栈", "dup.md#同名-x_3") + padding(19))
        e = only(canon.check_file(bad))
        assert e.startswith("networking.yml:11: ") and "'同名-x_3'" in e
    finally:
        questions.headings.cache_clear()


def test_null_without_reason(tmp_path):
    path = write(tmp_path, "networking.yml", GOOD + padding(18) + """\
  - id: no-reason
    topic: 没写原因
    source: cppref
    where: "x"
    covered_by: null
""")
    e = only(canon.check_file(path))
    line = 7 + 5 + 18 * 6 + 4  # header, GOOD, padding, then the covered_by line of the last topic
    assert e.startswith(f"{path}:{line}: ") and "gives no reason" in e


@pytest.mark.parametrize("field,minimum", sorted(canon.MINIMUM.items()))
def test_fewer_topics_than_minimum(tmp_path, field, minimum):
    path = write(tmp_path, f"{field}.yml", GOOD + padding(minimum - 2))
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:6: ") and f"fewer than the minimum {minimum}" in e and "add 1 more" in e


def test_field_must_match_file_name(tmp_path):
    path = write(tmp_path, "networking.yml", GOOD + padding(19), field="python")
    errors = canon.check_file(path)
    assert any(e.startswith(f"{path}:1: ") and "does not match the file name" in e for e in errors), errors


def test_missing_file_and_bad_yaml(tmp_path):
    (tmp_path / "cpp.yml").write_text("field: cpp\ntopics: [\n", encoding="utf-8")
    errors = canon.check(tmp_path)
    assert any("os.yml:1: missing canon file" in e for e in errors), errors
    assert any("cpp.yml:" in e and "not valid YAML" in e for e in errors), errors
