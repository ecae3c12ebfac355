"""Each kind of bad contribution is caught, with a message that names the file, the line and the fix."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import build
from tools import checks, labs

GOOD_FRONT = """---
title: 示例页面
description: 一个用来检验检查器的示例页面。
tags:
  - 算子层
---

# 示例页面

"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def only(problems, needle):
    hits = [p for p in problems if needle in p.message]
    assert hits, f"expected a problem about {needle!r}, got: {[str(p) for p in problems]}"
    return hits[0]


# ---------------------------------------------------------------- source checks, one fixture each

def test_missing_front_matter_field(tmp_path):
    page = write(tmp_path / "docs" / "a.md", GOOD_FRONT.replace("description: 一个用来检验检查器的示例页面。\n", ""))
    p = only(checks.check_front_matter(page, page.read_text()), "lacks 'description'")
    assert p.path.endswith("a.md") and "add it" in p.fix


def test_front_matter_that_is_not_yaml(tmp_path):
    page = write(tmp_path / "docs" / "a.md", GOOD_FRONT.replace("title: 示例页面", "title: [示例页面"))
    p = only(checks.check_front_matter(page, page.read_text()), "not valid YAML")
    assert p.line is not None and p.line >= 2


def test_unknown_tag(tmp_path):
    page = write(tmp_path / "docs" / "a.md", GOOD_FRONT.replace("  - 算子层", "  - 黑魔法"))
    p = only(checks.check_front_matter(page, page.read_text()), "unknown tag '黑魔法'")
    assert p.line == 5 and "data/tags.yml" in p.fix


def test_heading_differs_from_title(tmp_path):
    page = write(tmp_path / "docs" / "a.md", GOOD_FRONT.replace("# 示例页面", "# 另一个标题"))
    p = only(checks.check_front_matter(page, page.read_text()), "differs from the front matter title")
    assert p.line == 8


def test_remote_image():
    text = "正文\n\n![架构图](https://example.com/arch.png)\n"
    p = only(checks.check_text("docs/a.md", text), "remote image https://example.com/arch.png")
    assert p.line == 3 and "commit it beside the page" in p.fix
    p = only(checks.check_text("docs/a.md", '<img src="//cdn.example.com/x.svg">'), "remote image")
    assert p.line == 1


def test_invisible_character():
    p = only(checks.check_text("docs/a.md", "第一行\n共享\u200b内存\n"), "invisible character U+200B")
    assert p.line == 2 and "column 3" in p.message and "delete it" in p.fix
    only(checks.check_text("docs/a.md", "\ufeff# 标题"), "U+FEFF")
    only(checks.check_text("docs/a.md", "A\u00a0B"), "U+00A0")


def test_confusable_full_width_letters():
    p = only(checks.check_text("docs/a.md", "使用 ＣＵＤＡ 编程"), "full-width 'Ｃ'")
    assert "'C'" in p.fix


def test_code_block_without_language():
    p = only(checks.check_text("docs/a.md", "文字\n\n```\nx = 1\n```\n"), "code block without a language")
    assert p.line == 3


def test_chinese_english_spacing_and_punctuation():
    problems = checks.check_typography("docs/a.md", GOOD_FRONT + "使用CUDA编程,速度快\n")
    p = only(problems, "typography")
    assert p.line == 10 and "使用 CUDA 编程，速度快" in p.fix


def test_bad_file_names(tmp_path):
    write(tmp_path / "Bad_Name.md", "x")
    write(tmp_path / "good-name.md", "x")
    write(tmp_path / "Mixed Dir" / "index.md", "x")
    problems = checks.check_names(tmp_path)
    names = sorted(p.message for p in problems)
    assert len(problems) == 2, names
    bad = only(problems, "'Bad_Name.md'")
    assert "rename it to 'bad-name.md'" in bad.fix
    only(problems, "'Mixed Dir'")


def test_repository_sources_pass_every_check():
    problems = checks.check_sources()
    assert not problems, "\n".join(map(str, problems))


# ---------------------------------------------------------------- build-level: one fixture build

@pytest.fixture()
def broken_build(project_copy):
    """A copy of the project with a broken link, a broken anchor, a page outside the nav and a bad lab anchor."""
    docs = project_copy / "docs"
    with (docs / "runtime" / "index.md").open("a", encoding="utf-8") as f:
        f.write("\n另见[不存在的页面](../no-such-page.md)。\n")
    with (docs / "driver" / "index.md").open("a", encoding="utf-8") as f:
        f.write("\n另见[硬件层的不存在小节](../hardware/index.md#no-such-heading)。\n")
    with (docs / "compiler" / "index.md").open("a", encoding="utf-8") as f:
        f.write("\n另见[实验里不存在的小节](../operator/vector-add.ipynb#no-such-cell)。\n")
    write(docs / "operator" / "orphan-page.md", GOOD_FRONT.replace("示例页面", "孤立页面"))
    env = {"HANDBOOK_GIT_DATES": "false", "LABS_EXECUTE": "0"}
    strict = build(project_copy / "mkdocs.yml", project_copy / "site-strict", strict=True, env=env)
    loose = build(project_copy / "mkdocs.yml", project_copy / "site", strict=False, env=env)
    return project_copy, strict, loose


def test_broken_links_anchors_and_orphans_fail_the_build(broken_build):
    project, strict, loose = broken_build
    assert strict.returncode != 0, "a strict build with broken links must fail"
    log = strict.log
    assert "runtime/index.md" in log and "no-such-page.md" in log
    assert "no-such-heading" in log  # MkDocs' own anchor validation, for Markdown pages
    orphan = [w for w in strict.warnings() if "orphan-page.md" in w]
    assert orphan and "is not in the navigation" in orphan[0] and "docs/operator/.nav.yml" in orphan[0]

    assert loose.returncode == 0
    problems = checks.check_site(loose.site, root=project)
    link = only(problems, "broken link: ../no-such-page.md")
    assert link.path == "docs/runtime/index.md" and link.line and "point the link" in link.fix
    anchor = only(problems, "broken anchor: ../hardware/#no-such-heading")
    assert anchor.path == "docs/driver/index.md" and anchor.line
    # MkDocs does not validate anchors into notebook pages; the built-site check does.
    lab_anchor = only(problems, "broken anchor: ../operator/vector-add/#no-such-cell")
    assert lab_anchor.path == "docs/compiler/index.md" and "anchors are the heading text" in lab_anchor.fix


def test_foreign_script_in_built_html_is_caught(tmp_path):
    site = tmp_path / "site"
    write(site / "index.html", '<html><body><script src="https://cdn.example.com/x.js"></script></body></html>')
    p = only(checks.check_site(site), "loads https://cdn.example.com/x.js from another host")
    assert "self-host" in p.fix


def test_search_index_without_segmentation_is_caught(tmp_path):
    site = tmp_path / "site"
    write(site / "search" / "search_index.json", json.dumps({"docs": [{"title": "算子层", "text": "共享内存很快"}]}))
    p = only(checks.check_search_index(site), "no jieba-segmented Chinese")
    assert "install jieba" in p.fix


# ---------------------------------------------------------------- labs

def _lab(tmp_path: Path, extra_cells: list[dict], name: str = "bad-lab.ipynb") -> Path:
    path = tmp_path / "notebooks" / "operator" / name
    path.parent.mkdir(parents=True)
    nb = {"cells": [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# 实验：示例"}, *extra_cells],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    labs.sync(path)
    return path


def test_lab_with_committed_outputs(tmp_path):
    path = _lab(tmp_path, [{"cell_type": "code", "id": "c", "metadata": {}, "source": "print(1)", "outputs": [], "execution_count": None}])
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "1\n"}]
    nb["cells"][2]["execution_count"] = 1
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    p = only(labs.check_source(path), "committed with outputs")
    assert "bad-lab.ipynb" in p.path and "make labs-sync" in p.fix


def test_lab_with_a_modified_setup_cell(tmp_path):
    path = _lab(tmp_path, [])
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][1]["source"] += "\nprint('edited by hand')"
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    p = only(labs.check_source(path), "setup cell differs from tools/lab_setup.py")
    assert "bad-lab.ipynb" in p.path and "make labs-sync" in p.fix
    labs.sync(path)
    assert not labs.check_source(path)


def test_lab_without_a_setup_cell(tmp_path):
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# 实验"},
                                          {"cell_type": "code", "metadata": {}, "source": "1", "outputs": [], "execution_count": None}],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    only(labs.check_source(path), "not the shared setup cell")


def test_lab_with_a_failing_cell(tmp_path, monkeypatch):
    path = _lab(tmp_path, [{"cell_type": "code", "id": "boom", "metadata": {}, "outputs": [], "execution_count": None,
                            "source": "assert 1 + 1 == 3, 'reference mismatch'"}])
    monkeypatch.setattr(labs, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("LAB_FORCE_CPU", "1")
    with pytest.raises(labs.LabError) as err:
        labs.execute(path, use_cache=False)
    msg = str(err.value)
    assert "bad-lab.ipynb" in msg and "cell 3 failed" in msg and "reference mismatch" in msg and "make lab NB=" in msg


def test_lab_with_a_failing_cell_fails_the_build(project_copy):
    lab = project_copy / "notebooks" / "operator" / "vector-add.ipynb"
    for other in project_copy.joinpath("notebooks").rglob("*.ipynb"):  # only the broken lab needs to run
        if other != lab:
            other.unlink()
    nb = json.loads(lab.read_text(encoding="utf-8"))
    nb["cells"].append({"cell_type": "code", "id": "boom", "metadata": {}, "outputs": [], "execution_count": None,
                        "source": "raise RuntimeError('deliberately broken lab')"})
    lab.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    result = build(project_copy / "mkdocs.yml", project_copy / "site", strict=True,
                   env={"HANDBOOK_GIT_DATES": "false", "LAB_FORCE_CPU": "1"})
    assert result.returncode != 0
    assert "notebooks/operator/vector-add.ipynb" in result.log and "deliberately broken lab" in result.log
    assert "make lab NB=notebooks/operator/vector-add.ipynb" in result.log


def test_markdown_cell_typography_in_a_lab(tmp_path):
    path = _lab(tmp_path, [{"cell_type": "markdown", "id": "m", "metadata": {}, "source": "使用Triton编程"}])
    p = only(checks.check_notebook(path), "typography")
    assert "(cell 3)" in p.path



def test_bench_table_for_a_missing_record_names_the_fix():
    from mkdocs.exceptions import PluginError

    from tools import hooks

    table = hooks._BENCH_TABLE.sub(hooks._bench_table, "<!-- bench-table: nvidia-h200/operator/vector-add -->")
    assert "| Triton, BLOCK=1024 |" in table and "data/bench/nvidia-h200/operator-vector-add.json" in table
    with pytest.raises(PluginError) as err:
        hooks._BENCH_TABLE.sub(hooks._bench_table, "<!-- bench-table: nvidia-h200/operator/no-such-lab -->")
    assert "operator-no-such-lab.json" in str(err.value) and "make bench" in str(err.value)


def test_page_and_lab_at_the_same_url_fail_the_build(project_copy):
    page = project_copy / "docs" / "operator" / "vector-add.md"
    page.write_text(GOOD_FRONT.replace("示例页面", "向量加法"), encoding="utf-8")
    result = build(project_copy / "mkdocs.yml", project_copy / "site", strict=True,
                   env={"HANDBOOK_GIT_DATES": "false", "LABS_EXECUTE": "0"})
    assert result.returncode != 0
    assert "notebooks/operator/vector-add.ipynb and docs/operator/vector-add.md would both be published at /operator/vector-add/" in result.log
    assert "rename the lab to operator/vector-add-lab.ipynb" in result.log


def test_unmeasured_bench_placeholder():
    p = only(checks.check_text("docs/x.md", "前文\n\n<!-- bench-pending: nvidia-h200/operator/reduce-lab -->\n"), "bench-pending")
    assert p.line == 3 and "make bench" in p.fix


def test_a_source_snippet_outside_a_code_block_is_named():
    """A bare `--8<--` of a .py file renders the code as Markdown (`__init__` became bold on seven pages)."""
    from tools import checks

    bare = checks.check_text("docs/x.md", 'text\n\n--8<-- "code/algorithm/moe.py:layer"\n')
    assert [p.line for p in bare] == [3] and "outside a code block" in bare[0].message and "```python" in bare[0].fix
    fenced = checks.check_text("docs/x.md", 'text\n\n```python\n--8<-- "code/algorithm/moe.py:layer"\n```\n')
    assert fenced == []
