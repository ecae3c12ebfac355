"""The parts of the build that keep the site light and the preview fast: labs executed in parallel and
in the background, diagrams and math rendered at build time, and the errors each gives on bad input."""
from __future__ import annotations

import json
from pathlib import Path
import re
import shutil

import pytest

from conftest import build
from tools import diagrams, katex_static, labs


def _without_labs(project: Path) -> None:
    """Remove the project copy's labs and the catalogue's lines about them, and point the canon entries that a
    lab covered at nothing (with a reason), so the copy is consistent: the canon check rightly fails on a covering
    page that does not exist."""
    shutil.rmtree(project / "notebooks")
    # the lab catalogue's one-liners (tools/wayin.py) name labs too: a key for a missing lab fails the build
    (project / "data" / "labs.yml").unlink(missing_ok=True)
    for canon in (project / "data" / "canon").glob("*.yml"):
        text = canon.read_text(encoding="utf-8")
        text = re.sub(r"^(\s*)covered_by: \S+\.ipynb\S*$",
                      lambda m: f'{m.group(1)}covered_by: null\n{m.group(1)}reason: "this test project has no labs"',
                      text, flags=re.M)
        canon.write_text(text, encoding="utf-8")


def _tiny_lab(path, marker: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "cells": [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# 实验：小实验"},
                  {"cell_type": "code", "id": "c", "metadata": {}, "outputs": [], "execution_count": None,
                   "source": f"x = sum(range(10))\nassert x == 45\nprint('{marker}', x)"}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}, ensure_ascii=False), encoding="utf-8")


def test_labs_run_side_by_side_and_record_their_time(tmp_path, monkeypatch):
    monkeypatch.setattr(labs, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("HANDBOOK_LAB_JOBS", "2")
    monkeypatch.setenv("LAB_FORCE_CPU", "1")
    paths = [tmp_path / "notebooks" / "x" / f"lab-{i}.ipynb" for i in range(2)]
    for i, p in enumerate(paths):
        _tiny_lab(p, f"marker-{i}")
    results = labs.execute_many(paths)
    for i, p in enumerate(paths):
        nb = json.loads(results[p].read_text(encoding="utf-8"))
        assert nb["metadata"]["handbook"]["mode"] == "cpu" and nb["metadata"]["handbook"]["execution_seconds"] > 0
        assert f"marker-{i} 45" in "".join(nb["cells"][1]["outputs"][0]["text"])
        assert labs.cached(p) == results[p]


def test_a_failing_lab_among_parallel_ones_is_reported_with_its_name(tmp_path, monkeypatch):
    monkeypatch.setattr(labs, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("LAB_FORCE_CPU", "1")
    good, bad = tmp_path / "notebooks" / "x" / "good.ipynb", tmp_path / "notebooks" / "x" / "bad.ipynb"
    _tiny_lab(good, "ok")
    _tiny_lab(bad, "ok")
    bad.write_text(bad.read_text(encoding="utf-8").replace("x == 45", "x == 46"), encoding="utf-8")
    results = labs.execute_many([good, bad])
    assert isinstance(results[bad], labs.LabError) and "bad.ipynb" in str(results[bad]) and "make lab NB=" in str(results[bad])
    assert not isinstance(results[good], labs.LabError)


def test_preview_shows_a_pending_lab_with_a_banner_then_its_outputs(project_copy, tmp_path):
    """`make serve` (LABS_EXECUTE=background): the first build does not wait for labs."""
    _without_labs(project_copy)
    _tiny_lab(project_copy / "notebooks" / "operator" / "vector-add.ipynb", "背景执行完成")
    env = {"HANDBOOK_GIT_DATES": "false", "LABS_EXECUTE": "background", "HANDBOOK_LABS_CACHE": str(tmp_path / "labs")}
    first = build(project_copy / "mkdocs.yml", project_copy / "site", strict=False, env=env)
    assert first.returncode == 0, first.log[-2000:]
    page = (first.site / "operator" / "vector-add" / "index.html").read_text(encoding="utf-8")
    assert "lab-pending" in page and "本实验尚未执行" in page and "背景执行完成 45" not in page
    # the build process finished the background execution before it exited; the next build uses it
    assert list((tmp_path / "labs" / "done").glob("vector-add.done"))
    second = build(project_copy / "mkdocs.yml", project_copy / "site2", strict=False, env=env)
    page = (second.site / "operator" / "vector-add" / "index.html").read_text(encoding="utf-8")
    assert "lab-pending" not in page and "背景执行完成 45" in page


def test_an_unknown_lab_policy_is_refused(project_copy):
    result = build(project_copy / "mkdocs.yml", project_copy / "site", strict=False,
                   env={"HANDBOOK_GIT_DATES": "false", "LABS_EXECUTE": "sometimes"})
    assert result.returncode != 0 and "LABS_EXECUTE='sometimes' is not one of 1, 0, background" in result.log


@pytest.mark.skipif(diagrams.chromium() is None, reason="no Chromium: diagrams are rendered in the browser instead")
def test_diagrams_become_inline_svg_and_a_broken_one_names_its_page(tmp_path, monkeypatch):
    monkeypatch.setattr(diagrams, "CACHE", tmp_path / "diagrams")
    renderer = diagrams.Renderer()
    try:
        html = renderer.replace_fences('<p>x</p><pre class="mermaid"><code>flowchart LR\n  A[甲] --&gt; B[乙]</code></pre>',
                                       "docs/x.md")
        assert '<div class="mermaid mermaid-static" role="img" aria-label="示意图：甲、乙"><svg' in html  # named for screen readers
        assert "var(--md-mermaid-" in html, "the SVG must take its colours from the palette (light and dark)"
        assert renderer.rendered == 1 and len(list((tmp_path / "diagrams").glob("*.svg"))) == 1
        renderer.replace_fences('<pre class="mermaid"><code>flowchart LR\n  A[甲] --&gt; B[乙]</code></pre>', "docs/y.md")
        assert renderer.rendered == 1, "an unchanged diagram was rendered again instead of read from the cache"
        with pytest.raises(diagrams.DiagramError) as err:
            renderer.replace_fences('<pre class="mermaid"><code>flowchart LR\n  A[甲 --&gt; </code></pre>', "docs/bad.md")
        assert "docs/bad.md" in str(err.value) and "fix:" in str(err.value)
    finally:
        renderer.close()


@pytest.mark.skipif(not katex_static.enabled(), reason="no node: math is typeset in the browser instead")
def test_math_is_typeset_at_build_time_and_bad_tex_names_its_page(tmp_path, monkeypatch):
    monkeypatch.setattr(katex_static, "CACHE", tmp_path / "math")
    out = katex_static.render_page('<p><span class="arithmatex">\\(a^2 + b^2\\)</span></p>'
                                   '<div class="arithmatex">\\[\\frac{1}{\\sqrt{d_k}}\\]</div>', "docs/x.md")
    assert out.count('class="katex"') == 2 and out.count('class="katex-display" tabindex="0"') == 1  # display math nests a .katex; it scrolls, so it is focusable
    assert "arithmatex" not in out and "<math" in out, "screen readers need the MathML KaTeX adds"
    with pytest.raises(katex_static.MathError) as err:
        katex_static.render_page('<span class="arithmatex">\\(\\frac{1}{\\)</span>', "docs/bad.md")
    assert "docs/bad.md" in str(err.value) and "\\frac{1}{" in str(err.value) and "fix:" in str(err.value)


def _fixed_edition(tmp_path, html: str) -> str:
    """The one-page edition after tools/hooks.py has mended print-site's anchors and links."""
    from tools import hooks

    page = tmp_path / "print_page" / "index.html"
    page.parent.mkdir()
    page.write_text(html, encoding="utf-8")
    hooks._fix_print_page_anchors(tmp_path)
    return page.read_text(encoding="utf-8")


def test_one_page_edition_gets_every_anchor_its_links_use(tmp_path):
    """print-site prefixes links with the page id but not some targets (h1s, code lines): fixed after the build."""
    text = _fixed_edition(tmp_path, '<section class="print-page" id="stack"><h1 id="七层全景">七层全景<a href="#stack-七层全景">¶</a></h1>'
                          '<h2 id="stack-已有">x</h2><a id="__codelineno-0-1"></a><a href="#stack-__codelineno-0-1">1</a></section>'
                          '<section class="print-page" id="runtime"><h1 id="七层全景">同名标题</h1></section>')
    assert 'id="stack-七层全景"' in text and 'id="stack-__codelineno-0-1"' in text and 'id="stack-已有"' in text
    assert '<section class="print-page" id="runtime"><h1 id="七层全景">' in text, "an id no link uses is left alone"


def test_print_site_anchor_ids_get_the_page_prefix_in_linear_time(monkeypatch):
    """tools/hooks.py replaces print-site's update_anchor_ids (it scanned each tag to the end of its
    line: 30 s for one page of build-time math). Every id the plugin prefixed is prefixed the same
    way; a footnote that follows other tags on its line, which the plugin's scan missed, is too."""
    from mkdocs_print_site_plugin import urls

    from tools import hooks

    original = urls.update_anchor_ids
    monkeypatch.setattr(urls, "update_anchor_ids", original)  # restored after the test
    page = ('<h1 id="t">T</h1>\n<h2 class="x" id="why">Why <a class="headerlink" href="#why">¶</a></h2>\n'
            '<p>a<sup id="fnref:1"><a href="#fn:1">1</a></sup></p>\n<ol><li id="fn:1">note</li><li>plain</li></ol>\n'
            '<div id="not-a-heading"><h3 id="deep">D</h3></div>\n<h6 id="end">E</h6>')
    by_plugin = set(re.findall(r'\sid="([^"]*)"', original(page, "P")))
    hooks._patch_print_site()
    assert urls.update_anchor_ids is hooks._print_update_anchor_ids
    fixed = urls.update_anchor_ids(page, "P")
    assert by_plugin - {"fnref:1", "fn:1"} <= set(re.findall(r'\sid="([^"]*)"', fixed))
    assert fixed == page.replace('id="', 'id="P-').replace('id="P-not-a-heading"', 'id="not-a-heading"')
    math_line = "<p>" + '<span class="mord"><span class="vlist" style="height:1em;">x</span></span>' * 20000 + "</p>"
    assert urls.update_anchor_ids(math_line, "P") == math_line


def test_one_page_edition_drops_the_lightbox_links_print_site_mangles(tmp_path):
    """A lab figure's lightbox link points at the image's data URL; print-site turns it into an
    in-page anchor (#page-data:image-png;base64,...) with no target: the link goes, the figure stays."""
    text = _fixed_edition(tmp_path, '<section class="print-page" id="lab"><a class="glightbox" data-type="image" '
                          'href="#lab-data:image-png;base64,ivbor"><img src="data:image/png;base64,iVBOR"></a>'
                          '<a href="#lab-x">x</a><h2 id="lab-x">x</h2></section>')
    assert '<a class="glightbox" data-type="image"><img src="data:image/png;base64,iVBOR"></a>' in text
    assert '<a href="#lab-x">x</a>' in text, "ordinary in-page links are kept"


def test_one_page_edition_spells_each_fragment_one_way(tmp_path):
    """The PDF names a destination by the link's spelling: a percent-encoded link is written in UTF-8."""
    text = _fixed_edition(tmp_path, '<section class="print-page" id="hw"><h2 id="hw-5-roofline-模型">x</h2>'
                          '<a href="#hw-5-roofline-%E6%A8%A1%E5%9E%8B">a</a><a href="#hw-5-roofline-模型">b</a></section>')
    assert text.count('href="#hw-5-roofline-模型"') == 2 and "%E6" not in text


def test_one_page_edition_keeps_one_copy_of_each_lab_stylesheet(tmp_path):
    """Each lab carries the same inline Jupyter CSS; the one-page edition keeps the first copy only
    (51 copies made Chromium take minutes to open it), and styles that differ all stay."""
    from tools import hooks

    jupyter = "<style>.jp-Cell{margin:0}</style>"
    page = tmp_path / "print_page" / "index.html"
    page.parent.mkdir()
    page.write_text(f'<section id="a">{jupyter}<style>.a{{color:red}}</style><p>a</p></section>'
                    f'<section id="b">{jupyter}<style>.b{{color:blue}}</style><p>b</p></section>', encoding="utf-8")
    hooks._dedupe_print_styles(tmp_path)
    text = page.read_text(encoding="utf-8")
    assert text.count(jupyter) == 1 and text.index(jupyter) < text.index("<p>a</p>")
    assert ".a{color:red}" in text and ".b{color:blue}" in text and "<p>b</p>" in text

def test_cached_pages_still_have_their_links_and_anchors_checked(project_copy):
    """The Markdown render cache restores each page's anchors and links: renaming a heading that an
    unchanged (cached) page links to still fails the strict build, naming the linking page."""
    env = {"HANDBOOK_GIT_DATES": "false", "LABS_EXECUTE": "0"}
    first = build(project_copy / "mkdocs.yml", project_copy / "site", strict=True, env=env)
    assert first.returncode == 0, "\n".join(first.warnings()) or first.log[-2000:]
    target = project_copy / "docs" / "operator" / "index.md"
    text = target.read_text(encoding="utf-8")
    assert "## 访存密集型还是计算密集型" in text, "the heading this test renames moved: update the test"
    target.write_text(text.replace("## 访存密集型还是计算密集型", "## 改名后的小节"), encoding="utf-8")
    second = build(project_copy / "mkdocs.yml", project_copy / "site2", strict=True, env=env)
    assert second.returncode != 0
    assert any("operator/gemm.md" in w and "访存密集型还是计算密集型" in w for w in second.warnings()), second.warnings()
