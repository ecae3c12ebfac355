"""The offline edition is printed chapter by chapter and joined (tools/pdf.py): links that cross
chapters must survive the join, and a link with no destination must fail the build, named."""
from __future__ import annotations

import pytest
from pypdf import PdfReader

from tools import pdf
from tools.diagrams import CHROMIUM_ARGS, chromium

EDITION = """<html><body><div id="print-site-page">
<section id="print-site-cover-page"><h1>cover</h1></section>
<section class="print-page" id="algo"><h1 id="algo-top">A</h1>
  <p><a href="#ops-gemm">to the GEMM page</a> <a href="#algo-deep">down</a></p></section>
<section class="print-page" id="algo-deep"><h1 id="algo-deep-x">A2</h1></section>
<section class="print-page" id="ops"><h1 id="ops-top">O</h1></section>
<section class="print-page" id="ops-gemm"><h1 id="ops-gemm-x">G</h1><p><a href="#algo-top">back</a></p></section>
</div></body></html>"""


def _print(tmp_path):
    from playwright.sync_api import sync_playwright

    if chromium() is None:
        pytest.skip("needs Chromium")
    html = tmp_path / "index.html"
    html.write_text(EDITION, encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(html.as_uri())
        parts = pdf._print_by_chapter(page, tmp_path / "parts")
        browser.close()
    return parts


def test_chapters_print_apart_and_cross_chapter_links_survive_the_join(tmp_path):
    parts = _print(tmp_path)
    assert len(parts) == 2, "two chapters (algo-*, ops-*) give two parts"
    # Chromium writes a destination for each element that a link targets, in the part that lays it out
    first, second = (set(PdfReader(str(p)).named_destinations) for p in parts)
    assert first == {"/algo-top", "/algo-deep"} and second == {"/ops-gemm"}
    report = pdf._join(parts, tmp_path / "book.pdf")
    # pypdf keeps a link whose name it already holds (ops-gemm -> algo-top) and drops one it does not
    # yet (algo -> ops-gemm): that one is put back
    assert report["parts"] == 2 and report["pdf_links"] == 3 and report["pdf_links_restored"] == 1
    book = PdfReader(str(tmp_path / "book.pdf"))
    targets = {}
    for number, page in enumerate(book.pages):
        for annot in page.get("/Annots") or []:
            link = annot.get_object()
            dest = link["/Dest"]
            targets[dest] = (number, book.get_destination_page_number(book.named_destinations[dest]))
    assert set(targets) == {"/ops-gemm", "/algo-deep", "/algo-top"}
    assert targets["/ops-gemm"][1] > targets["/ops-gemm"][0], "the link lands on the later chapter's page"
    assert targets["/algo-top"][1] == 0


def test_a_link_with_no_destination_fails_the_join_and_is_named(tmp_path):
    """A target that no part lays out (here: the part holding it is left out) leaves its links
    dangling; targets missing from the page altogether are caught earlier, on the one-page edition."""
    parts = _print(tmp_path)
    with pytest.raises(SystemExit) as err:
        pdf._join(parts[:1], tmp_path / "book.pdf")
    assert "/ops-gemm" in str(err.value) and "fix:" in str(err.value)
    assert not (tmp_path / "book.pdf").exists(), "nothing is written when a link is dangling"
