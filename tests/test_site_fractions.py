"""No built page shows a vulgar fraction (½, ¼, ¾, ⅓ ...) that its source does not contain.

pymdownx.smartsymbols replaces "1/2" with "½" unless its `fractions` option is off; with it on, the
framework pages printed "ZeRO-1/2/3" as "ZeRO-½/3". mkdocs.yml turns the option off and
tools/hooks.py refuses to build a Markdown page that gains such a character; this test reads the
built HTML of every page and lab, so it also catches a lab's rendering or a change of the hook.
"""
from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT
from tools import labs

FRACTIONS = re.compile("[\u00bc-\u00be\u2150-\u215e]")
ARTICLE = re.compile(r"<article\b.*?</article>", re.S)


def source_of(page: Path, site: Path) -> Path | None:
    """The Markdown file or notebook a built page comes from (None for generated pages)."""
    rel = page.parent.relative_to(site).as_posix()
    rel = "" if rel == "." else rel
    candidates = [ROOT / "docs" / f"{rel}.md", ROOT / "docs" / rel / "index.md", labs.NOTEBOOKS / f"{rel}.ipynb"]
    return next((c for c in candidates if c.is_file()), None)


def stray_fractions(site: Path) -> list[str]:
    problems = []
    for page in sorted(site.rglob("index.html")):
        rel = page.relative_to(site).as_posix()
        if rel.startswith(("print_page/", "assets/", "search/")):
            continue
        html = page.read_text(encoding="utf-8")
        content = "".join(ARTICLE.findall(html)) or html  # the page itself, not the navigation of every page
        found = set(FRACTIONS.findall(content))
        if not found:
            continue
        source = source_of(page, site)
        allowed = set(source.read_text(encoding="utf-8")) if source else set()
        stray = found - allowed
        if stray:
            where = source.relative_to(ROOT).as_posix() if source else "(generated page)"
            problems.append(f"{rel} ({where}): {''.join(sorted(stray))} is not in the source")
    return problems


def test_no_page_gains_a_fraction_character(site):
    problems = stray_fractions(site)
    assert not problems, "a Markdown extension turned a fraction like 1/2 into a single character " \
                         "(keep pymdownx.smartsymbols' fractions: false in mkdocs.yml):\n" + "\n".join(problems)


def test_zero_stages_are_printed_as_written(site):
    html = (site / "framework" / "parallelism-planning" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", html)  # "ZeRO" is wrapped in the glossary's <abbr>
    assert "ZeRO-1/2/3" in text and "ZeRO-1/2 " in text and "½" not in text


def test_the_check_finds_a_rewritten_fraction(tmp_path):
    page = tmp_path / "framework" / "parallelism-planning" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text("<nav>½</nav><article>ZeRO-½/3</article>", encoding="utf-8")
    problems = stray_fractions(tmp_path)
    assert len(problems) == 1 and "framework/parallelism-planning/index.html" in problems[0] \
        and "docs/framework/parallelism-planning.md" in problems[0]
    page.write_text("<nav>½</nav><article>ZeRO-1/2/3</article>", encoding="utf-8")
    assert stray_fractions(tmp_path) == []
