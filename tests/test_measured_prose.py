"""Measured figures in the prose that reads a table are computed from the table's record at build time.

(a) every "读这张表" paragraph (and the other readings of measured tables named in MARKERS) states its
    percentages, ratios and measured times or rates only through {{bench ...}} / {{record ...}} tokens
    (tools/measured.py), so a sentence cannot disagree with its table; every token in docs/ computes;
(b) the token expansion itself, on a small synthetic record: ratio, share, reference, min/max, the
    errors that name the page, the token and the fix;
(c) the one hand-written table such a paragraph reads (the CUDA Graph page's) equals its record."""
from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT
from tools import measured

DOCS = ROOT / "docs"
# The paragraphs that read a measured table. "读这张表" opens one on every page that has one; the
# others are a second paragraph on the same table and the latency reading of the collectives table.
MARKERS = ("读这张表", "**反向的行。**", "**延迟区**")

# A number a reader would take for a measurement: a share, a ratio, a time or a rate, in digits or in words.
HAND_WRITTEN = [
    (re.compile(r"\d+(?:\.\d+)?\s*%"), "a percentage"),
    (re.compile(r"\d+(?:\.\d+)?\s*倍"), "a ratio"),
    (re.compile(r"\d+(?:\.\d+)?\s*(?:TFLOP/s|TFLOPS|GFLOP/s|GFLOPS|TB/s|GB/s|µs|us|ms)(?![A-Za-z])"), "a measured time or rate"),
    (re.compile(r"[一二两三四五六七八九十百]+\s*倍"), "a ratio in words"),
    (re.compile(r"[一二三四五六七八九]成"), "a share in words"),
    (re.compile(r"[一二三四五六七八九十]+分之[一二三四五六七八九十]+"), "a fraction in words"),
]

# Numbers in those paragraphs that are not measurements, so they stay as text. Keep this list short:
# anything measured, or computable from a record or data/hardware/gpus.yml, is a token instead.
ALLOWED = {
    # targets the project set itself (README.md, "目标" column): constants a measurement is compared with
    "*": ["85% 目标", "85% 的目标"],
    "operator/flash-attention.md": ["90% 的目标"],
    "operator/gemm.md": ["98% 的目标"],
    # the bound of a kernel that reads twice and writes once (12n bytes) against the copy's 8n: 8/12,
    # derived on the page from byte counts
    "operator/softmax.md": ["上限（约 67%）"],
    "operator/layernorm.md": ["67% 上限"],
    # the page's roofline table: 729 TFLOP/s for NCHW with a separate layout conversion, over the fp16 peak
    # 989.5; and the im2col + GEMM lower bound 0.107 + 0.120 ms, both formulas of the section above
    "operator/convolution.md": ["约 74%（729 对 989.5）", "0.227 ms"],
    # 4-byte against 16-byte loads: a ratio of instruction widths
    "operator/elementwise.md": ["四分之一的在途字节"],
}

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _prose_lines(text: str):
    fence = None
    for i, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0]
            yield i, None
        elif fence is not None:
            if m and m.group(1)[0] == fence:
                fence = None
            yield i, None
        else:
            yield i, line


def reading_paragraphs(text: str):
    """(first line number, [(line number, line)]) for every paragraph that opens with a marker. A marker in
    a list item takes that item; a paragraph that ends in a colon takes the list that follows it."""
    lines = list(_prose_lines(text))
    for k, (i, line) in enumerate(lines):
        if line is None or not any(m in line for m in MARKERS):
            continue
        block, j = [(i, line)], k + 1
        item = line.lstrip().startswith(("- ", "* "))
        while j < len(lines) and lines[j][1] and lines[j][1].strip() and not (item and lines[j][1].lstrip().startswith(("- ", "* "))):
            block.append(lines[j])
            j += 1
        if block[-1][1].rstrip().endswith(("：", ":")):
            while j < len(lines) and lines[j][1] is not None and not lines[j][1].strip():
                j += 1
            while j < len(lines) and lines[j][1] and (lines[j][1].startswith(("- ", "* ")) or lines[j][1].startswith("  ")):
                block.append(lines[j])
                j += 1
        yield i, block


def hand_written(rel: str, line: str) -> list[str]:
    """The hand-written measured-looking numbers of one line, outside tokens, code and the allow-list."""
    line = measured.TOKEN.sub("‹token›", line)
    line = measured.CODE_SPAN.sub("‹code›", line)
    for allowed in ALLOWED["*"] + ALLOWED.get(rel, []):
        line = line.replace(allowed, "‹allowed›")
    return [f"{what} {m.group(0)!r}" for rx, what in HAND_WRITTEN for m in rx.finditer(line)]


PAGES = sorted(p for p in DOCS.rglob("*.md") if any(m in p.read_text(encoding="utf-8") for m in MARKERS))


def test_the_reading_paragraphs_are_found():
    found = {p.relative_to(DOCS).as_posix() for p in PAGES}
    expected = {f"operator/{x}.md" for x in ("grid-sample", "softmax", "flash-attention", "sort", "convolution", "gemm",
                                             "reduce", "quantized-kernels", "transpose", "elementwise", "layernorm")}
    expected |= {"runtime/cuda-graph.md", "driver/linux-driver-model.md", "runtime/collectives.md"}
    assert expected <= found, f"no reading paragraph found in {sorted(expected - found)}"
    with_tokens = [p for p in PAGES for _, block in reading_paragraphs(p.read_text(encoding="utf-8"))
                   if any(measured.TOKEN.search(line) for _, line in block)]
    # every one of them quotes measurements except the Linux driver page's, which reads a legend of link types
    assert {p.relative_to(DOCS).as_posix() for p in with_tokens} >= expected - {"driver/linux-driver-model.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_reading_paragraphs_state_measured_figures_only_through_tokens(page):
    rel = page.relative_to(DOCS).as_posix()
    problems = []
    for _, block in reading_paragraphs(page.read_text(encoding="utf-8")):
        for n, line in block:
            problems += [f"docs/{rel}:{n}: {x}" for x in hand_written(rel, line)]
    assert not problems, ("a paragraph that reads a measured table states a number by hand; write it as a token "
                          "computed from the record, e.g. {{bench GPU/SECTION/LAB ratio(a, b) fmt=.1f}} (see "
                          "CONTRIBUTING.md and tools/measured.py), or, if it is not a measurement, add it to "
                          "ALLOWED in tests/test_measured_prose.py with the reason:\n" + "\n".join(problems))


def test_the_scan_catches_hand_written_figures():
    assert hand_written("x.md", "fp8 约 1.8 倍，约 96%，1239 TFLOPS，95.1 µs，六成，两倍，四分之三")
    text = "**读这张表。** 约 {{bench g/s/l share(x) fmt=.0%}}，85% 的目标，`64x4`。\n\n下一段 50%。\n"
    [(start, block)] = list(reading_paragraphs(text))
    assert start == 1 and len(block) == 1 and not hand_written("x.md", block[0][1])
    listed = "读这张表：\n\n- **一。** 7.5 µs\n- **二。** 约 2 倍\n\n后文 9 µs\n"
    [(_, block)] = list(reading_paragraphs(listed))
    assert [n for n, _ in block] == [1, 3, 4]


@pytest.mark.parametrize("page", sorted(p for p in DOCS.rglob("*.md") if "{{" in p.read_text(encoding="utf-8")),
                         ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_token_in_docs_computes(page):
    rel = f"docs/{page.relative_to(DOCS).as_posix()}"
    out = measured.expand(page.read_text(encoding="utf-8"), rel)
    assert not measured.LOOSE.search(measured.CODE_SPAN.sub("", out))


EARLIER = sorted((ROOT / "data" / "bench-earlier").rglob("*.json"))


@pytest.mark.parametrize("path", EARLIER, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_records_of_earlier_runs_are_complete_bench_records(path):
    """data/bench-earlier/<gpu>/<run>/ keeps a record that a later run replaced, where a page still reads it."""
    import jsonschema

    schema = json.loads((ROOT / "data" / "schemas" / "bench-record.json").read_text(encoding="utf-8"))
    record = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(record)
    assert path.parent.parent.name in record["provenance"]["gpu"].lower().replace(" ", "-")
    current = ROOT / "data" / "bench" / path.parent.parent.name / path.name
    assert current.is_file() and json.loads(current.read_text(encoding="utf-8"))["provenance"]["date"] > record["provenance"]["date"]
    assert record["provenance"]["date"].replace("-", "").replace(":", "")[:13] == path.parent.name.replace("-", "")[:8] + "T" + path.parent.name[-4:]


def test_the_errata_read_from_the_record():
    """The two sentences that once disagreed with their tables (1.8 for 1.9; an example of 'above 100 µs' that was 95.1)."""
    q = measured.expand((DOCS / "operator" / "quantized-kernels.md").read_text(encoding="utf-8"), "q")
    rec = json.loads((ROOT / "data" / "bench" / "nvidia-h200" / "operator-int8-gemm.json").read_text(encoding="utf-8"))
    top = max(r["n"] for r in rec["results"])
    t = {r["rung"]: r for r in rec["results"] if r["n"] == top}
    assert f"fp8（快速累加）约 {t['triton-fp8']['tflops'] / t['torch-fp16']['tflops']:.1f} 倍" in q
    c = measured.expand((DOCS / "runtime" / "collectives.md").read_text(encoding="utf-8"), "c")
    coll = json.loads((ROOT / "data" / "records" / "nvidia-h200-x2" / "collectives.json").read_text(encoding="utf-8"))
    small = [r["time_us"] for run in coll["runs"] if run["algo"] is None for r in run["results"] if r["size"] < 2**20]
    assert f"偶尔有单点慢到 {max(small):.1f} µs" in c and "100 µs 以上" not in c


# ------------------------------------------------------------------ (b) the expansion on a synthetic record

def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj, encoding="utf-8")


@pytest.fixture
def data(tmp_path):
    def row(rung, n, ms, flops):
        return {"rung": rung, "n": n, "time_ms": ms, "gbps": 8e3 * n / ms / 1e6, "tflops": flops / ms / 1e9}

    _write(tmp_path / "hardware" / "gpus.yml",
           "gpus:\n  toy-gpu:\n    device_name: Toy GPU\n    fp16_tensor_dense_tflops: 1000\n    memory_bandwidth_gbps: 100\n")
    _write(tmp_path / "bench" / "toy-gpu" / "copy.json",
           {"results": [{"rung": "torch-copy", "n": 1, "gbps": 50.0}, {"rung": "torch-copy", "n": 2, "gbps": 80.0}]})
    _write(tmp_path / "bench" / "toy-gpu" / "operator-toy.json", {
        "metric": "tflops", "reference": {"fast-a": "lib-a", "fast-b": "lib-b"}, "provenance": {"gpu": "Toy GPU"},
        "results": [row("fast-a", 1000, 1.0, 4e9), row("lib-a", 1000, 2.0, 4e9), row("fast-b", 1000, 1.0, 6e9),
                    row("lib-b", 1000, 4.0, 6e9), row("fast-a", 10, 0.5, 4e7), row("lib-a", 10, 0.5, 4e7)]})
    _write(tmp_path / "records" / "toy-gpu" / "toy.json", {
        "provenance": {"gpu": "Toy GPU"},
        "results": {"rows": [{"k": 1, "t": {"median": 10.0}}, {"k": 2, "t": {"median": 14.0}}, {"k": 4, "t": {"median": 22.0}}]},
        "runs": [{"algo": None, "results": [{"op": "a", "size": 65536, "time_us": 95.1}, {"op": "b", "size": 2**20, "time_us": 5.0}]}]})
    return tmp_path


def tok(data, text):
    return measured.expand(text, "docs/toy.md", data)


def test_bench_token_values(data):
    b = "{{bench toy-gpu/operator/toy "
    assert tok(data, b + "ratio(fast-a, lib-a) fmt=.1f}} 倍") == "2.0 倍"          # throughput ratio at the largest n
    assert tok(data, b + "speedup(fast-b, lib-b) fmt=.0f}}") == "4"                   # time(lib-b) / time(fast-b)
    assert tok(data, b + "ref(fast-b) fmt=.0%}}") == "400%"                          # the table's 占对照
    assert tok(data, b + "share(fast-a) fmt=.0%}}") == "10%"                          # 8 GB/s over the 80 GB/s ceiling
    assert tok(data, b + "time(lib-a) fmt=.0f}} µs") == "2000 µs"
    assert tok(data, b + "ratio(fast-a, lib-a) n=10 fmt=.1f}}") == "1.0"
    assert tok(data, b + "max(ref(fast-*)) fmt=.0%}}") == "400%"                     # a '*' takes every matching rung
    assert tok(data, b + "min(speedup(fast-*, lib-*)) - 1 fmt=.0%}}") == "100%"      # ... and pairs them
    assert tok(data, b + "max(ratio(fast-a, lib-a)) n=* fmt=.1f}}") == "2.0"         # over every size
    assert tok(data, b + "tflops(fast-a) / spec(fp16_tensor_dense_tflops) fmt=.1%}}") == "0.4%"
    assert tok(data, b + "8 * n / ceiling / 1000 fmt=.1f}}") == "0.1"
    assert tok(data, "`{{bench nothing}}` 与\n```text\n{{bench nothing}}\n```\n") == "`{{bench nothing}}` 与\n```text\n{{bench nothing}}\n```\n"


def test_record_token_values(data):
    r = "{{record records/toy-gpu/toy "
    assert tok(data, r + "results.rows[k=4].t.median fmt=.1f}}") == "22.0"
    assert tok(data, r + "slope(results.rows[*].k, results.rows[*].t.median) fmt=.1f}}") == "4.0"
    assert tok(data, r + "max(results.rows[k>=2].t.median) - min(results.rows[*].t.median) fmt=.0f}}") == "12"
    assert tok(data, r + "runs[algo=null].results[op=a][size=64KiB].time_us fmt=.1f}}") == "95.1"
    assert tok(data, r + "count(runs[algo=null].results[size<1MiB].time_us) fmt=.0f}}") == "1"
    assert tok(data, r + "spec(memory_bandwidth_gbps) fmt=.0f}}") == "100"


@pytest.mark.parametrize("token,what,fix", [
    ("{{bench toy-gpu/operator/toy ratio(fast-c, lib-a) fmt=.1f}}", "no rung 'fast-c'", "use one of: fast-a, lib-a, fast-b, lib-b"),
    ("{{bench toy-gpu/operator/toy ratio(fast-a, lib-a) n=99 fmt=.1f}}", "no size n = 99", "use one of [10, 1000]"),
    ("{{bench toy-gpu/operator/nope share(x) fmt=.0%}}", "no record", "make bench"),
    ("{{bench toy-gpu/operator/toy ratio(fast-a, lib-a)}}", "no fmt=", "state the rounding"),
    ("{{bench toy-gpu/operator/toy ref(lib-a) fmt=.0%}}", "no reference rung", "ratio(lib-a, OTHER)"),
    ("{{bench toy-gpu/operator/toy ref(fast-*) fmt=.0%}}", "gives 2 values", "wrap it in min()"),
    ("{{bench toy-gpu/operator/toy tflops(fast-a)/tflops(lib-a) fmt=.1f}}", "unexpected", "spaces around operators"),
    ("{{record records/toy-gpu/toy results.rows.k fmt=.0f}}", "is a list", "results.rows[*].k"),
    ("{{record records/toy-gpu/toy results.rows[k=3].t.median fmt=.0f}}", "matches nothing", "correct the filter"),
    ("{{record records/toy-gpu/toy results.rows[k=1].t fmt=.0f}}", "not a number", "extend the path"),
    ("{{bench toy-gpu/operator/toy share(fast-a) fmt=.0%", "not closed", "on one line"),
])
def test_errors_name_the_page_the_token_and_the_fix(data, token, what, fix):
    with pytest.raises(measured.MeasuredError) as err:
        tok(data, f"前文 {token} 后文")
    message = str(err.value)
    assert message.startswith("docs/toy.md: ") and what in message and "fix:" in message and fix in message, message
    if "not closed" not in what:
        assert token in message


def test_the_build_hook_expands_tokens():
    """tools/hooks.py calls the expansion right after the bench tables, so the page's Markdown has numbers."""
    source = (ROOT / "tools" / "hooks.py").read_text(encoding="utf-8")
    assert re.search(r"markdown = _BENCH_TABLE\.sub\(_bench_table, markdown\)\n\s+markdown = measured\.expand\(", source)


# ------------------------------------------------------------------ (c) the CUDA Graph page's table

def test_cuda_graph_table_equals_record():
    rec = json.loads((ROOT / "data" / "records" / "nvidia-h200" / "cuda_graph_launch.json").read_text(encoding="utf-8"))
    rows = {r["kernels"]: r for r in rec["results"]["rows"]}

    def sig3(x):  # three significant digits, as the table prints them
        return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"

    checked = 0
    for line in (DOCS / "runtime" / "cuda-graph.md").read_text(encoding="utf-8").splitlines():
        if not re.match(r"\| \d+ \|", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        r = rows[int(cells[0])]
        assert cells[1:] == [sig3(r["eager_wall_per_kernel_us"]["median"]), sig3(r["eager_gpu_span_per_kernel_us"]["median"]),
                             sig3(r["replay_wall_per_kernel_us"]["median"]), f"{r['capture_ms']:.2f}",
                             f"{r['instantiate_ms']:.2f}", sig3(r["first_replay_us"])], line
        checked += 1
    assert checked >= 5
