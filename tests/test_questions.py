"""The question bank: schema, answer links that land on real headings, generated pages, coverage."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from bs4 import BeautifulSoup

from conftest import ROOT
from tools import questions


@pytest.fixture(scope="module")
def bank():
    return questions.load()


def test_bank_is_valid_and_large(bank):
    assert len(bank["questions"]) >= 100
    assert {q["source"] for q in bank["questions"]} <= set(bank["sources"])


def test_every_answer_lands_on_a_real_heading(bank, site):
    problems = []
    for q in bank["questions"]:
        if not q["answer"]:
            continue
        page, _, anchor = q["answer"].partition("#")
        html = site / (page.removesuffix("index.md").removesuffix(".md").removesuffix(".ipynb") + "/index.html").lstrip("/")
        if page == "index.md":
            html = site / "index.html"
        if not html.exists():
            problems.append(f"{q['id']}: no page {page}")
            continue
        target = BeautifulSoup(html.read_text(encoding="utf-8"), "lxml").find(id=anchor)
        if target is None or target.name not in {"h1", "h2", "h3", "h4", "h5", "h6"}:
            problems.append(f"{q['id']}: {q['answer']} is not a heading of {page}")
    assert not problems, "data/questions.yml answers that do not resolve (fix the page#anchor):\n" + "\n".join(problems)


def test_generated_pages_list_every_question_and_are_in_the_nav(bank, site):
    for name in ("questions-by-layer", "questions-by-source"):
        html = (site / "interview" / name / "index.html").read_text(encoding="utf-8")
        rows = BeautifulSoup(html, "lxml").select("article table tbody tr")
        assert len(rows) == len(bank["questions"]), name
    nav = (site / "interview" / "index.html").read_text(encoding="utf-8")
    assert 'href="questions-by-layer/"' in nav and 'href="questions-by-source/"' in nav


def test_coverage_report_counts_match(bank):
    out = subprocess.run([sys.executable, "-m", "tools.questions", "coverage"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    total = len(bank["questions"])
    answered = sum(1 for q in bank["questions"] if q["answer"])
    assert f"{answered:8d} {total:6d}" in out.splitlines()[len({q['layer'] for q in bank['questions']}) + 1]
    assert out.count("\n  [") == total - answered


def test_bad_bank_entries_are_named_with_the_fix(tmp_path, monkeypatch):
    data = yaml.safe_load(questions.BANK.read_text(encoding="utf-8"))
    data["questions"][0]["source"] = "no-such-source"
    bad = tmp_path / "questions.yml"
    bad.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    monkeypatch.setattr(questions, "BANK", bad)
    with pytest.raises(questions.BankError) as err:
        questions.load()
    assert "no-such-source" in str(err.value) and "fix:" in str(err.value)
    data["questions"][0]["source"] = next(iter(data["sources"]))
    data["questions"][0]["layer"] = "nowhere"
    bad.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with pytest.raises(questions.BankError) as err:
        questions.load()
    assert "questions/0/layer" in str(err.value)
