"""The offline edition is cut into parts of whole pages, each printed on its own and then joined
(tools/pdf.py): links that cross parts must survive the join, a link left without a destination
must fail the build, named, and the joined book must read as one (page numbers that go on, no empty
pages at the joins, one outline with the nav's chapters at the top, the shared lab setup cell
printed once)."""
from __future__ import annotations

import re

import pytest
from pypdf import PdfReader

from tools import pdf
from tools.diagrams import CHROMIUM_ARGS, chromium

# the markup print-site writes (cover, table of contents, one titled section per nav section that
# wraps its pages) with the rules of its stylesheet that decide page breaks and the page footer
EDITION = """<html><head><title>t</title><style>
@page { @bottom-right { content: 'Page ' counter(page); } }
#print-site-page section.print-page { break-before: page; }
#print-site-page > section.print-page:first-of-type { break-before: avoid; }
</style></head><body><article><div id="print-site-page">
<section id="print-site-cover-page"><h1>cover</h1></section>
<section class="print-page"><div id="print-page-toc"><a href="#ops-gemm">toc entry</a></div></section>
<section class='print-page md-section' id='section-2' heading-number='2'><h1>Algo<a class='headerlink' href='#section-2'></a></h1>
<section class="print-page" id="algo"><h1 id="algo-top">Algo</h1><h2 id="algo-子 `节`">子节</h2>
  <p><a href="#ops-gemm-x">to the GEMM page</a> <a href="#algo-deep">down</a></p></section>
<section class="print-page" id="algo-deep"><h1 id="algo-deep-x">A2</h1>
  <div class="jp-Cell jp-CodeCell celltag_setup"><div class="jp-Cell jp-CodeCell celltag_setup" id="cell-id=lab-setup">
  <div class="jp-InputArea">SETUPCODE</div></div></div></section>
</section>
<section class='print-page md-section' id='section-3' heading-number='3'><h1>Ops</h1>
<section class="print-page" id="ops"><h1 id="ops-top">O</h1>
  <div class="jp-Cell jp-CodeCell celltag_setup"><div class="jp-Cell jp-CodeCell celltag_setup" id="cell-id=lab-setup">
  <div class="jp-InputArea">SETUPCODE</div></div></div></section>
<section class="print-page" id="ops-gemm"><h1 id="ops-gemm-x">G</h1><p><a href="#algo-top">back</a></p></section>
</section>
</div><style>.print-site-enumerate-headings #algo > h1:before { content: '1 ' }</style></article></body></html>"""


def test_the_edition_is_cut_into_documents_of_whole_pages():
    docs = pdf.split_edition(EDITION)
    assert len(docs) == 2, "two chapters (algo-*, ops-*) give two documents"
    algo, ops = docs
    assert 'id="algo-deep"' in algo and 'id="ops"' not in algo and "cover" in algo
    assert 'id="ops-gemm"' in ops and 'id="algo"' not in ops and "cover" not in ops
    assert all(d.startswith("<html><head><title>t</title>") and "</article></body></html>" in d for d in docs)
    # a link into the other document keeps a hidden target; an id another document links to gets a hidden link
    assert '<span id="ops-gemm-x"></span>' in algo and '<a href="#algo-top"></a>' in algo
    assert '<span id="algo-top"></span>' in ops and '<a href="#ops-gemm-x"></a>' in ops
    # a size bound cuts a chapter too: one page per document here
    small = pdf.split_edition(EDITION, max_bytes=1)
    assert [re.findall(r'<section class="print-page" id="([^"]+)"', d) for d in small] == [["algo"], ["algo-deep"], ["ops"], ["ops-gemm"]]
    assert '<span id="algo-deep"></span>' in small[0] and '<a href="#algo-deep"></a>' in small[1]


def test_the_outline_is_read_from_the_headings_of_the_edition():
    assert pdf.edition_outline(EDITION) == [(1, "Algo", "section-2"), (2, "子节", "algo-子 `节`"), (2, "A2", "algo-deep-x"),
                                            (1, "Ops", "section-3"), (2, "O", "ops-top"), (2, "G", "ops-gemm-x")]
    nested = ("<section class='print-page md-section' id='section-10' heading-number='10'>\n <h1>基础<a class='headerlink'"
              " href='#section-10'>¶</a></h1><section class='print-page md-section' id='section-10-2' heading-number='10.2'>"
              '<h1>C++</h1><section class="print-page" id="cpp-move"><h1 id="cpp-move-x">移动语义</h1>'
              '<h2 id="cpp-move-why">为什么要乘 <span class="katex"><span class="katex-mathml"><math><semantics><mrow>'
              '<msup><mi>T</mi><mn>2</mn></msup></mrow><annotation encoding="application/x-tex">T^2</annotation>'
              '</semantics></math></span><span class="katex-html" aria-hidden="true">T2</span></span>'
              '<a class="headerlink" href="#cpp-move-why">¶</a></h2></section></section></section>')
    assert pdf.edition_outline(nested) == [(1, "基础", "section-10"), (2, "C++", "section-10-2"),
                                           (3, "移动语义", "cpp-move-x"), (4, "为什么要乘 T^2", "cpp-move-why")]


def test_a_heading_without_a_destination_fails_the_outline_and_is_named(parts, tmp_path):
    with pytest.raises(SystemExit) as err:
        pdf._join(parts, tmp_path / "book.pdf", [(1, "lost", "no-such-heading")])
    assert "no-such-heading" in str(err.value) and "fix:" in str(err.value)


@pytest.fixture
def parts(tmp_path):
    from playwright.sync_api import sync_playwright

    if chromium() is None:
        pytest.skip("needs Chromium")
    (tmp_path / "print_page").mkdir()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        printed = pdf._print_parts(browser, tmp_path.as_uri() + "/", tmp_path, EDITION)
        browser.close()
    return printed


def test_the_joined_book_reads_as_one(parts, tmp_path):
    first, second = (set(PdfReader(str(p)).named_destinations) for p in parts)
    assert {"/algo-top", "/algo-deep"} <= first and "/ops-gemm-x" in second
    report = pdf._join(parts, tmp_path / "book.pdf", pdf.edition_outline(EDITION))
    assert report["parts"] == 2 and report["pdf_links"] == 3 and report["pdf_links_restored"] >= 1
    book = PdfReader(str(tmp_path / "book.pdf"))
    texts = [page.extract_text() for page in book.pages]
    # cover, Algo title, algo, algo-deep, Ops title | ops, ops-gemm: no empty page where the parts meet
    assert len(texts) == 7 and all(t.replace(f"Page {i + 1}", "").strip() for i, t in enumerate(texts))
    assert [re.findall(r"Page (\d+)", t) for t in texts] == [[str(i + 1)] for i in range(7)], "page numbers go on across parts"
    assert "".join(texts).count("SETUPCODE") == 1 and "".join(texts).count("tools/lab_setup.py") == 1
    landing = {}
    for number, page in enumerate(book.pages):
        for annot in page.get("/Annots") or []:
            dest = annot.get_object()["/Dest"]
            landing[dest] = (number, book.get_destination_page_number(book.named_destinations[dest]))
    assert set(landing) == {"/ops-gemm-x", "/algo-deep", "/algo-top"}, "the table of contents is not printed"
    assert "G\nback" in texts[landing["/ops-gemm-x"][1]] and landing["/ops-gemm-x"][1] > landing["/ops-gemm-x"][0]
    assert "to the GEMM page" in texts[landing["/algo-top"][1]]

    def tree(items):
        out = []
        for item in items:
            if isinstance(item, list):
                out[-1] = (out[-1], tree(item))
            else:
                out.append(item.title)
        return out

    assert tree(book.outline) == [("Algo", ["子节", "A2"]), ("Ops", ["O", "G"])], \
        "sections at the top, pages under them, the overview page's headings straight under its section"
    assert report["pdf_outline"] == 6


def test_a_link_with_no_destination_fails_the_join_and_is_named(parts, tmp_path):
    """A target that no part lays out (here the part holding it is left out) leaves its links
    dangling; targets missing from the page altogether are caught earlier, on the one-page edition."""
    with pytest.raises(SystemExit) as err:
        pdf._join(parts[:1], tmp_path / "book.pdf")
    assert "/ops-gemm-x" in str(err.value) and "fix:" in str(err.value)
    assert not (tmp_path / "book.pdf").exists(), "nothing is written when a link is dangling"


def test_the_footer_links_the_offline_edition_only_where_the_build_made_it():
    """overrides/partials/copyright.html: HANDBOOK_PRINT=true (make pdf, the deploy workflow) sets
    extra.offline_edition, and only then does every page's footer link print_page/ and the PDF."""
    from pathlib import Path

    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).resolve().parents[1] / "overrides"))
    env.filters["url"] = lambda path: "../" + path
    template = env.get_template("partials/copyright.html")
    made = template.render(config={"copyright": "CC BY-SA 4.0", "extra": {"offline_edition": True}})
    assert '<a href="../print_page/">' in made and '<a href="../handbook.pdf">PDF</a>' in made and "CC BY-SA 4.0" in made
    plain = template.render(config={"copyright": "CC BY-SA 4.0", "extra": {"offline_edition": False}})
    assert "handbook.pdf" not in plain and "CC BY-SA 4.0" in plain
