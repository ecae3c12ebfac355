"""The offline edition is printed chapter by chapter and joined (tools/pdf.py): links that cross
chapters must survive the join, and a link left without a destination must fail the build, named."""
from __future__ import annotations

import pytest
from pypdf import PdfReader

from tools import pdf
from tools.diagrams import CHROMIUM_ARGS, chromium

EDITION = """<html><head><title>t</title></head><body><article><div id="print-site-page">
<section id="print-site-cover-page"><h1>cover</h1></section>
<section class="print-page"><div id="print-page-toc"><a href="#ops-gemm">toc entry</a></div></section>
<section class="print-page" id="algo"><h1 id="algo-top">A</h1>
  <p><a href="#ops-gemm-x">to the GEMM page</a> <a href="#algo-deep">down</a></p></section>
<section class="print-page" id="algo-deep"><h1 id="algo-deep-x">A2</h1></section>
<section class="print-page" id="ops"><h1 id="ops-top">O</h1></section>
<section class="print-page" id="ops-gemm"><h1 id="ops-gemm-x">G</h1><p><a href="#algo-top">back</a></p></section>
</div><style>.print-site-enumerate-headings #algo > h1:before { content: '1 ' }</style></article></body></html>"""


def test_the_edition_is_cut_into_one_document_per_chapter():
    docs = pdf.split_edition(EDITION)
    assert len(docs) == 2, "two chapters (algo-*, ops-*) give two documents"
    algo, ops = docs
    assert 'id="algo-deep"' in algo and 'id="ops"' not in algo and "cover" in algo
    assert 'id="ops-gemm"' in ops and 'id="algo"' not in ops and "cover" not in ops
    assert all(d.startswith("<html><head><title>t</title>") and "</article></body></html>" in d for d in docs)
    # a link into the other chapter keeps a hidden target; an id another chapter links to gets a hidden link
    assert '<span id="ops-gemm-x"></span>' in algo and '<a href="#algo-top"></a>' in algo
    assert '<span id="algo-top"></span>' in ops and '<a href="#ops-gemm-x"></a>' in ops


def _print(tmp_path, docs):
    from playwright.sync_api import sync_playwright

    if chromium() is None:
        pytest.skip("needs Chromium")
    parts = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        for k, doc in enumerate(docs):
            html = tmp_path / f"part-{k}.html"
            html.write_text(doc, encoding="utf-8")
            page.goto(html.as_uri())
            page.add_style_tag(content=pdf.PRINT_CSS)
            page.pdf(path=str(html.with_suffix(".pdf")), outline=True)
            parts.append(html.with_suffix(".pdf"))
        browser.close()
    return parts


def test_cross_chapter_links_survive_the_join(tmp_path):
    parts = _print(tmp_path, pdf.split_edition(EDITION))
    first, second = (set(PdfReader(str(p)).named_destinations) for p in parts)
    assert {"/algo-top", "/algo-deep"} <= first and "/ops-gemm-x" in second
    report = pdf._join(parts, tmp_path / "book.pdf")
    assert report["parts"] == 2 and report["pdf_links"] == 3 and report["pdf_links_restored"] >= 1
    book = PdfReader(str(tmp_path / "book.pdf"))
    landing = {}
    for number, page in enumerate(book.pages):
        for annot in page.get("/Annots") or []:
            dest = annot.get_object()["/Dest"]
            landing[dest] = (number, book.get_destination_page_number(book.named_destinations[dest]))
    assert set(landing) == {"/ops-gemm-x", "/algo-deep", "/algo-top"}, "the table of contents is not printed"
    assert landing["/ops-gemm-x"][1] > landing["/ops-gemm-x"][0], "the link lands in the later chapter"
    assert landing["/algo-top"][1] == 0


def test_a_link_with_no_destination_fails_the_join_and_is_named(tmp_path):
    """A target that no part lays out (here the part holding it is left out) leaves its links
    dangling; targets missing from the page altogether are caught earlier, on the one-page edition."""
    parts = _print(tmp_path, pdf.split_edition(EDITION))
    with pytest.raises(SystemExit) as err:
        pdf._join(parts[:1], tmp_path / "book.pdf")
    assert "/ops-gemm-x" in str(err.value) and "fix:" in str(err.value)
    assert not (tmp_path / "book.pdf").exists(), "nothing is written when a link is dangling"
