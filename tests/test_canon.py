"""The canons of every layer (data/canon/*.yml, tools/canon.py): the real data passes, and each error is reported.

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
    assert page.startswith("---\ntitle: 面试题纲\n")
    assert page.count("| 主题 | 出处 | 本站 |") == len(list(canon.CANON.glob("*.yml")))
    # every link of the generated page (relative to docs/foundations/) lands on an existing heading
    from tools.questions import headings

    links = re.findall(r"\]\(((?!https?:)[^)#]+\.md)#([^)]+)\)", page)
    assert len(links) >= 80
    for rel, anchor in links:
        target = (ROOT / "docs" / "foundations" / rel).resolve().relative_to(ROOT / "docs").as_posix()
        assert anchor in headings(target), (rel, anchor)


def write(directory, name: str, topics: str, *, field: str | None = None, layer: str = "foundations",
          extra: str = "") -> "Path":
    """A canon file with `layer:` on line 5 and `topics:` on line 6, so its first topic starts on line 7.

    `extra` is inserted as more top-level lines after `layer:` (each one moves the topics down a line)."""
    field = field or name.removesuffix(".yml")
    body = textwrap.dedent(f"""\
        field: {field}
        title: Test
        sources:
          cppref: {{title: "cppreference", url: "https://en.cppreference.com/w/"}}
        layer: {layer}
        """) + textwrap.dedent(extra) + "topics:\n" + textwrap.dedent(topics)
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


# ---- canons of every layer: `layer:`, per-file `minimum:`, per-layer totals


def test_real_canon_declares_known_layers():
    layers = {d["field"]: d["layer"] for d in canon._fields(canon.CANON)}
    assert set(layers.values()) <= set(canon.LAYERS), layers
    assert {f: layers[f] for f in canon.MINIMUM} == dict.fromkeys(canon.MINIMUM, "foundations")
    text = canon.report()
    for layer in set(layers.values()):
        assert re.search(rf"^\[{layer}\]\s+\d+\s+\d+\s+\d+%$", text, re.M), text


def test_layer_canon_in_temp_dir(tmp_path):
    """A new layer's canon needs no change to tools/canon.py: any field name, a known layer, the default minimum."""
    assert canon.check_file(write(tmp_path, "operator.yml", GOOD + padding(19), layer="operator")) == []
    assert canon.check_file(write(tmp_path, "kernels.yml", GOOD + padding(19), layer="compiler")) == []


def test_unknown_layer(tmp_path):
    path = write(tmp_path, "operator.yml", GOOD + padding(19), layer="operater")
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:5: ") and "unknown layer 'operater'" in e and "fix:" in e and "did you mean 'operator'" in e


def test_missing_layer(tmp_path):
    path = tmp_path / "operator.yml"
    path.write_text(write(tmp_path, "operator.yml", GOOD + padding(19)).read_text(encoding="utf-8")
                    .replace("layer: foundations\n", ""), encoding="utf-8")
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:1: ") and "missing top-level key `layer`" in e and "foundations" in e and "operator" in e


def test_default_minimum_names_the_fix(tmp_path):
    path = write(tmp_path, "kernels.yml", GOOD + padding(17), layer="operator")
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:6: ") and f"18 topics, fewer than the minimum {canon.DEFAULT_MINIMUM}" in e
    assert "(the default)" in e and "add 2 more" in e and "`minimum: <n>`" in e


def test_declared_minimum(tmp_path):
    assert canon.check_file(write(tmp_path, "kernels.yml", GOOD + padding(4), layer="runtime", extra="minimum: 5\n")) == []
    path = write(tmp_path, "kernels.yml", GOOD + padding(2), layer="runtime", extra="minimum: 5\n")
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:7: ") and "fewer than the minimum 5" in e and "(declared in the file)" in e


@pytest.mark.parametrize("value", ["many", "0", "-3", "true"])
def test_bad_minimum(tmp_path, value):
    path = write(tmp_path, "kernels.yml", GOOD + padding(19), layer="driver", extra=f"minimum: {value}\n")
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:6: ") and "is not a positive integer" in e and "fix:" in e


def test_minimum_below_the_foundations_floor(tmp_path):
    path = write(tmp_path, "cpp.yml", GOOD + padding(39), extra="minimum: 10\n")
    e = only(canon.check_file(path))
    assert e.startswith(f"{path}:6: ") and "below the floor 40 for cpp" in e and "fix:" in e


def test_per_layer_totals_and_page(tmp_path):
    second = GOOD.replace("good-topic", "good-two")
    write(tmp_path, "networking.yml", GOOD + padding(19))  # foundations: 1 of 20
    write(tmp_path, "python.yml", GOOD + padding(19))  # foundations: 1 of 20
    write(tmp_path, "operator.yml", GOOD + second + padding(20), layer="operator")  # operator: 2 of 22
    rows = [line.split() for line in canon.report(tmp_path).splitlines()[1:7]]
    assert rows == [["[operator]", "2", "22", "9%"], ["operator", "2", "22", "9%"],
                    ["[foundations]", "2", "40", "5%"], ["networking", "1", "20", "5%"], ["python", "1", "20", "5%"],
                    ["all", "4", "62", "6%"]]
    text = canon.report(tmp_path)
    assert "uncovered (58):" in text and "  [operator] pad-0: 填充 — fixture" in text
    page = canon.markdown(tmp_path)
    layer_titles = [line for line in page.splitlines() if line.startswith("## ")]
    assert layer_titles == ["## 算子层", "## 基础"]  # from docs/<layer>/.nav.yml, in LAYERS order
    assert page.count("### Test") == 3 and page.count("| 主题 | 出处 | 本站 |") == 3
    assert "覆盖 2/22（9%）。" in page and "覆盖 2/40（5%）。" in page and "| 合计 | | 4/62（6%） |" in page
    assert "](cpp/memory.md#堆与栈)" in page  # a foundations link, relative to docs/foundations/canon.md
