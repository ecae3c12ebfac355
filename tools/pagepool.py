"""The slow, self-contained parts of a build, done in worker processes while the build goes on.

A cold build (a fresh clone's first `make serve`, CI) spends most of its CPU time in three steps
that need nothing from the rest of the build but their own input:

- converting a lab notebook to HTML (mkdocs-jupyter's `nb2html`: nbconvert's template, then its
  BeautifulSoup pass);
- post-processing that HTML into a lab page (`lab_page` below: banner, anchors, search marks);
- turning a rendered page into search entries (Material's HTML parser and jieba's segmentation).

MkDocs renders pages one after another in one process, so on a machine with two or more cores the
hooks (tools/hooks.py) hand these steps to a `Pool` of worker processes: every lab is submitted as
soon as the navigation is known, and each page's search entries when the page is rendered. A worker
writes exactly the cache entries the serial path would write (mkdocs-jupyter's cache file, the
"lab-pages" and "search" stages below), so when the build reaches a lab its conversion is a cache
hit, and the index is assembled in page order. A worker's failure is never final: the build then
does that step itself, in process, and reports the error exactly as it would without workers.
tests/test_pagepool.py checks that the workers' output equals the serial path's.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every build's stage caches (tools/hooks.py): one JSON file per entry, keyed by its full input.
STAGE_CACHE = Path(os.environ.get("HANDBOOK_BUILD_CACHE") or ROOT / ".cache" / "build")
_SOURCE = Path(__file__).read_text(encoding="utf-8")  # part of the lab-page key: a change here redoes them
_SOURCE += Path(__file__).with_name("reader.py").read_text(encoding="utf-8")  # and there (lab_page calls it)


def stage_key(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def stage_get(stage: str, key: str):
    path = STAGE_CACHE / stage / f"{key}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def stage_put(stage: str, key: str, value) -> None:
    folder = STAGE_CACHE / stage
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
    tmp.replace(folder / f"{key}.json")


# ------------------------------------------------------------------ lab pages
def notebook_title(fpath) -> tuple[list, str | None]:
    """A lab's title: its first '# ' heading, read straight from the JSON. (mkdocs-jupyter would
    convert the notebook a second time, to Markdown, to find its headings; the lab page's table of
    contents is rebuilt from its HTML by lab_page anyway.)"""
    nb = json.loads(Path(fpath).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            for line in text.splitlines():
                if line.startswith("# "):
                    return [], line[2:].strip()
    return [], None


def lab_page_key(html: str, why: str | None) -> str:
    return stage_key("lab-page", html, why or "", _SOURCE)


def _foreign(url: str | None) -> bool:
    from urllib.parse import urlparse

    return bool(url) and bool(urlparse(url).netloc or url.startswith("//"))


def lab_page(html: str, why: str | None) -> tuple[str, list[dict]]:
    """A converted lab as the site shows it, and its table of contents (MkDocs toc tokens)."""
    from bs4 import BeautifulSoup
    from pymdownx.slugs import slugify

    from tools import reader

    slug = slugify(case="lower")
    # html.parser keeps the fragment as it is (lxml would move mkdocs-jupyter's <style> into a <head>).
    soup = BeautifulSoup(html, "html.parser")
    if why is not None:  # shown without outputs: say so at the top, never pass it off as executed
        banner = BeautifulSoup('<div class="admonition warning lab-pending"><p class="admonition-title">'
                               '本实验尚未执行，下面只有代码，没有输出</p><p></p></div>', "html.parser")
        banner.find_all("p")[1].string = why
        soup.insert(0, banner)
    # Keep a lab's code out of its indexed prose: the code cells (and their hidden copies for the copy
    # button) were 44 % of the search index (tools/searchindex.py indexes the words of the code cells
    # in a field of their own, and leaves the outputs out). Material's indexer skips an element marked
    # `data-search-exclude` and strips the mark afterwards; the mark goes on the innermost elements,
    # because its parser forgets the mark at the first nested closing tag of the same name (a marked
    # <div> stops being skipped at its first inner </div>).
    for el in soup.select("div.jp-CodeCell div.jp-InputArea pre, div.jp-CodeCell div.clipboard-copy-txt, "
                          "div.jp-InputPrompt, div.jp-OutputPrompt, div.jp-CodeCell span.notice, span.cell-tag"):
        el["data-search-exclude"] = "true"
    # nbconvert's template adds MathJax and Mermaid loaders from CDNs; the site uses its own KaTeX and Mermaid.
    for script in soup.find_all("script"):
        text = script.string or ""
        if _foreign(script.get("src")) or "MathJax" in text or "mermaid" in text:
            script.decompose()
    # Stable anchors with the same slug function as Markdown pages (all-Chinese headings included).
    seen: dict[str, int] = {}
    tokens: list[dict] = []
    stack: list[dict] = []
    for h in soup.find_all(re.compile(r"^h[1-6]$")):
        for a in h.find_all("a", class_="anchor-link"):
            a.decompose()
        name = h.get_text(" ", strip=True)
        base = slug(name, "-") or "section"
        n = seen.get(base, 0)
        seen[base] = n + 1
        hid = base if n == 0 else f"{base}_{n}"
        h["id"] = hid
        link = soup.new_tag("a", href=f"#{hid}", attrs={"class": "headerlink", "title": "Permanent link"})
        link.string = "¶"
        h.append(link)
        # the TOC shows the heading's math as text (the page typesets it; the TOC would show `$P$`)
        token = {"level": int(h.name[1]), "id": hid, "name": reader.lab_heading(name), "children": []}
        while stack and stack[-1]["level"] >= token["level"]:
            stack.pop()
        (stack[-1]["children"] if stack else tokens).append(token)
        stack.append(token)
    # The setup cell is the same in every lab: its code folds away (its output, the mode line, stays).
    for cell in soup.select("div.jp-CodeCell.celltag_setup"):
        inputs = cell.select_one("div.jp-Cell-inputWrapper")
        if inputs is None or cell.select_one("div.jp-CodeCell.celltag_setup") is not None:
            continue  # the template nests a cell's div in one that carries its tags too: fold it once
        details = soup.new_tag("details", attrs={"class": "lab-setup"})
        summary = soup.new_tag("summary")
        summary.string = "实验环境准备（每个实验相同：取仓库文件、补装包、选择 GPU 或 CPU 解释器；点开查看代码）"
        details.append(summary)
        inputs.wrap(details)
        details.insert(0, summary)
    # Code and outputs scroll sideways on narrow screens; keyboard users must be able to focus them.
    for pre in soup.find_all("pre"):
        pre["tabindex"] = "0"
    reader.lab_images(soup)  # plots get an alt text from the cell that drew them (tools/reader.py)
    return str(soup), tokens


def convert_lab(job: dict) -> dict:
    """Worker: what mkdocs-jupyter's render would do for one lab (same nb2html call, same cache
    file), then lab_page's post-processing into the "lab-pages" stage. A page with a Mermaid
    diagram is left to the build, which renders diagrams before post-processing."""
    from mkdocs_jupyter import convert

    with _Captured() as logs:
        body = convert.nb2html(job["path"], **job["nb2html"])
        _, title = notebook_title(job["path"])
        cache_path = Path(job["cache_path"])
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_name(f".{cache_path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"content": body, "toc_tokens": [], "title": title}), encoding="utf-8")
        tmp.replace(cache_path)
        if 'class="mermaid"' not in body:
            html, tokens = lab_page(body, job["why"])
            stage_put("lab-pages", lab_page_key(body, job["why"]), {"html": html, "toc": tokens})
    return {"logs": logs.records}


# ------------------------------------------------------------------ search entries
_jieba_ready: set[str] = set()


def search_entries(job: dict) -> dict:
    """Worker: Material's SearchIndex.add_entry_from_context for one page, from plain data."""
    from types import SimpleNamespace

    from material.plugins.search.plugin import SearchIndex
    from mkdocs.structure.toc import get_toc

    with _Captured() as logs:
        user_dict = job.get("jieba_dict_user")
        if user_dict and user_dict not in _jieba_ready:  # what the search plugin's on_config does
            import jieba

            jieba.load_userdict(user_dict)
            _jieba_ready.add(user_dict)
        index = SearchIndex(**job["config"])
        page = SimpleNamespace(meta=job["meta"], content=job["content"], toc=get_toc(job["toc"]),
                               url=job["url"], title=job["title"])
        index.add_entry_from_context(page)
    return {"entries": index.entries, "logs": logs.records}


# ------------------------------------------------------------------ the pool
class _Captured(logging.Handler):
    """Collects a worker's warnings and errors, so the build can log them where it uses the result."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record):
        self.records.append((record.name, record.levelno, record.getMessage()))

    def __enter__(self):
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger().removeHandler(self)


def _quiet_worker() -> None:
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("jieba").setLevel(logging.WARNING)


def workers() -> int:
    """HANDBOOK_BUILD_JOBS, else one per core; 0 or 1 turns the workers off (everything in process)."""
    value = os.environ.get("HANDBOOK_BUILD_JOBS")
    return int(value) if value else (os.cpu_count() or 1)


class Pool:
    """Worker processes for one build. Started by spawn: the build may already run threads (the
    preview server, the diagram browser), which a forked child would inherit in whatever state."""

    def __init__(self, size: int):
        import multiprocessing
        import sys
        from concurrent.futures import ProcessPoolExecutor

        # A spawned worker starts with the build's sys.path, and MkDocs takes back the entry the hooks
        # add while it loads them: without the repository root a worker cannot import this module.
        if str(ROOT) not in sys.path:
            sys.path.append(str(ROOT))
        self.executor = ProcessPoolExecutor(max_workers=size, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_quiet_worker)
        self.labs: dict[str, object] = {}  # a lab's src_uri -> the future converting it

    def submit(self, fn, job: dict):
        return self.executor.submit(fn, job)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


# The pool of the build under way. Kept here, not in tools/hooks.py: MkDocs loads the hooks afresh
# for every rebuild of `make serve`, while the search index wrapper installed by the first build
# stays in place, so state they share must live in a module that is imported once.
_state: dict = {"pool": None, "misses": 0}


def begin_build() -> None:
    close()
    _state["misses"] = 0


def current() -> Pool | None:
    return _state["pool"]


def start() -> Pool | None:
    """The build's pool, started now if there is none and the machine has more than one core."""
    if _state["pool"] is None and workers() > 1:
        _state["pool"] = Pool(workers())
    return _state["pool"]


def close() -> None:
    if _state["pool"] is not None:
        _state["pool"].close()
        _state["pool"] = None


# A rebuild after an edit misses a page or two: starting workers would cost more than it saves.
SEARCH_IN_PROCESS = 8


def count_search_miss() -> int:
    _state["misses"] += 1
    return _state["misses"]


class DeferredEntries:
    """A page's search entries being computed by a worker, resolved in page order before the index is written."""

    def __init__(self, future, key: str, job: dict):
        self.future, self.key, self.job = future, key, job

    def entries(self, log: logging.Logger) -> list:
        out = result(self.future, f"search entries of /{self.job['url']}", log)
        entries = out["entries"] if out is not None else search_entries(self.job)["entries"]
        stage_put("search", self.key, entries)
        return entries


def result(future, what: str, log: logging.Logger):
    """A worker's result with its captured warnings re-logged, or None if the worker failed (the
    build then does the step itself, so an error is reported once, by the serial path)."""
    try:
        out = future.result()
    except Exception as exc:  # the worker died or raised: redo it in process
        log.debug(f"{what}: worker failed ({exc!r}); done in process instead")
        return None
    for name, level, message in out.pop("logs", []):
        logging.getLogger(name).log(level, message)
    return out
