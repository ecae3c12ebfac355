"""MkDocs hooks of the handbook: the only build-time code besides the plugins in mkdocs.yml.

- labs: notebooks/<section>/<slug>.ipynb are executed (cached, see tools/labs.py) and placed in
  the URL space of their section, with stable heading anchors, no third-party scripts, and the
  data the lab buttons in overrides/main.html need;
- vendor assets: KaTeX and Mermaid from node_modules (npm ci) are published under assets/vendor/,
  so no page loads anything from another host;
- glossary: the abbreviations of data/glossary.yml are appended to every Markdown page (tooltips,
  kept at a term's first occurrence outside headings: tools/reader.py, with the other reading fixes);
- question bank: two pages under interview/ are generated from data/questions.yml;
- navigation: a page or lab that is not in any .nav.yml is a warning that names the fix.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from html import escape
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File
from mkdocs.structure.toc import get_toc

ROOT = Path(__file__).resolve().parents[1]
# nbformat's default validator (fastjsonschema) compiles the notebook schema again for every
# notebook it converts: half of a lab's conversion time. The jsonschema validator gives the same
# verdicts and caches its schema.
os.environ.setdefault("NBFORMAT_VALIDATOR", "jsonschema")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools import canon, diagrams, katex_static, labs, pagepool, questions  # noqa: E402
from tools import instant_nav, searchindex  # noqa: E402  (what search indexes; instant navigation)
from tools import measured  # noqa: E402  (measured figures in prose: {{bench ...}}, {{record ...}})
from tools import wayin  # noqa: E402  (the lab catalogue; the home page's offline-edition links)
from tools import reader  # noqa: E402  (glossary tooltips once per page, rows of formulas, lab TOCs and plot alt texts)

log = logging.getLogger("mkdocs.plugins.handbook")

VENDOR = [  # (file or folder under node_modules, destination under the site)
    ("katex/dist/katex.min.js", "assets/vendor/katex/katex.min.js"),
    ("katex/dist/katex.min.css", "assets/vendor/katex/katex.min.css"),
    ("katex/dist/contrib/auto-render.min.js", "assets/vendor/katex/contrib/auto-render.min.js"),
    ("katex/dist/fonts", "assets/vendor/katex/fonts"),
    # The ES-module build loads only the chunks a page's diagram types need (a flowchart pulls
    # a fraction of the 3.5 MB single-file build).
    ("mermaid/dist/mermaid.esm.min.mjs", "assets/vendor/mermaid/mermaid.esm.min.mjs"),
    ("mermaid/dist/chunks/mermaid.esm.min", "assets/vendor/mermaid/chunks/mermaid.esm.min"),
]
_lab_sources: dict[str, Path] = {}
_diagrams: diagrams.Renderer | None = None


def _is_lab(file) -> bool:
    return file.src_uri.endswith(".ipynb")


# ------------------------------------------------------------------ build caches
# A rebuild after a one-page edit repeats three slow steps for every page whose input did not
# change: mkdocs-jupyter's notebook conversion, the post-processing of lab pages, and the search
# plugin's parsing and jieba segmentation. Each is cached under .cache/build/ by its full input.
STAGE_CACHE = pagepool.STAGE_CACHE
_stage_key, _stage_get, _stage_put = pagepool.stage_key, pagepool.stage_get, pagepool.stage_put


def _versions(*names: str) -> str:
    from importlib.metadata import version

    return ",".join(f"{n}={version(n)}" for n in names)


def _toc_signature(items) -> str:
    return ";".join(f"{i.id}>{i.url}[{_toc_signature(i.children)}]" for i in items)


_SNIPPET = re.compile(r'--8<--\s+"([^"]+)"')


def _cache_markdown_render(config) -> None:
    """Cache Page.render (Markdown to HTML, the largest share of a rebuild) by everything it reads.

    The key holds the page's final Markdown (after on_page_markdown), its path, the URL of every
    documentation file (links are resolved against them), mkdocs.yml, the package versions and,
    for pages with snippets, the files they include. The cached entry restores what render()
    produces, including the anchors the page has and the anchors it links to, so MkDocs still
    validates every anchor on every build. A render that logged a warning is never cached, so a
    broken link warns on every build until it is fixed."""
    import hashlib
    import json

    from mkdocs.structure.pages import Page

    if getattr(Page.render, "_handbook_cached", False):
        return
    original = Page.render
    salt = _stage_key(_versions("mkdocs", "mkdocs-material", "markdown", "pymdown-extensions"),
                      (ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    class _Warnings(logging.Handler):
        def __init__(self):
            super().__init__(logging.WARNING)
            self.count = 0

        def emit(self, record):
            self.count += 1

    def render(self, config, files):
        if self.markdown is None:
            return original(self, config, files)
        urls = getattr(files, "_handbook_urls", None)
        if urls is None:
            urls = hashlib.sha256("\n".join(sorted(f"{f.src_uri} {f.url}" for f in files)).encode()).hexdigest()
            files._handbook_urls = urls
        snippets = ""
        if "--8<--" in self.markdown:
            h = hashlib.sha256()
            for ref in sorted(set(_SNIPPET.findall(self.markdown))):
                path = ref.split(":")[0]
                for base in (ROOT, ROOT / "docs"):
                    if (base / path).is_file():
                        h.update(path.encode() + b"\0" + (base / path).read_bytes())
                        break
            snippets = h.hexdigest()
        key = _stage_key(salt, urls, self.file.src_uri, snippets, self.markdown)
        hit = _stage_get("render", key)
        if hit is not None:
            self.content = hit["content"]
            self.toc = get_toc(hit["toc"])
            self._title_from_render = hit["title"]
            self.present_anchor_ids = set(hit["anchors"])
            if hit["links"] is not None:
                self.links_to_anchors = {files.get_file_from_path(uri): links for uri, links in hit["links"].items()
                                         if files.get_file_from_path(uri) is not None}
            return None
        watcher = _Warnings()
        mkdocs_log = logging.getLogger("mkdocs")
        mkdocs_log.addHandler(watcher)
        try:
            original(self, config, files)
        finally:
            mkdocs_log.removeHandler(watcher)
        if watcher.count == 0 and "--8<--" not in (self.content or ""):
            tokens = json.loads(json.dumps([_toc_tokens(i) for i in self.toc]))
            links = None
            if self.links_to_anchors is not None:
                links = {f.src_uri: dict(v) for f, v in self.links_to_anchors.items()}
            _stage_put("render", key, {"content": self.content, "toc": tokens, "title": self._title_from_render,
                                       "anchors": sorted(self.present_anchor_ids or ()), "links": links})
        return None

    render._handbook_cached = True
    Page.render = render


def _toc_tokens(item) -> dict:
    return {"level": item.level, "id": item.id, "name": item.title,
            "children": [_toc_tokens(c) for c in item.children]}


def _cheap_notebook_toc() -> None:
    """mkdocs-jupyter converts every notebook a second time, to Markdown, only to read its headings;
    on_page_content rebuilds a lab's table of contents from its HTML anyway, so only the title
    (the first '# ' heading) is read, straight from the JSON (pagepool.notebook_title)."""
    from mkdocs_jupyter import plugin as jupyter_plugin

    if getattr(jupyter_plugin._get_nb_toc_tokens, "_handbook_cheap", False):
        return

    def title_only(fpath, toc_depth):
        return pagepool.notebook_title(fpath)

    title_only._handbook_cheap = True
    jupyter_plugin._get_nb_toc_tokens = title_only


def _cache_search_entries() -> None:
    """Wrap Material's SearchIndex.add_entry_from_context with a cache of the entries it adds; on a
    cold build, pages beyond the first few are indexed by worker processes (tools/pagepool.py)."""
    from material.plugins.search import plugin as search_plugin

    index_cls = search_plugin.SearchIndex
    if getattr(index_cls.add_entry_from_context, "_handbook_cached", False):
        return
    original = index_cls.add_entry_from_context
    original_generate = index_cls.generate_search_index
    salt = _stage_key(_versions("mkdocs-material", "jieba"),
                      (ROOT / "tools" / "jieba-user-dict.txt").read_text(encoding="utf-8"), searchindex.SALT)

    def add_entry_from_context(self, page):
        import json

        meta = {k: page.meta.get(k) for k in ("title", "tags", "search")}  # what the indexer reads
        key = _stage_key(salt, json.dumps(self.config, sort_keys=True, default=str), page.url, str(page.title),
                         json.dumps(meta, sort_keys=True, default=str, ensure_ascii=False),
                         _toc_signature(page.toc), page.content or "")
        hit = _stage_get("search", key)
        if hit is not None:
            self.entries.extend(hit)
            return
        page = searchindex.for_index(page)  # formulas once, lab code in and lab outputs out (tools/searchindex.py)
        pool = pagepool.current()
        if pool is None and pagepool.count_search_miss() > pagepool.SEARCH_IN_PROCESS:
            pool = pagepool.start()
        if pool is not None:
            config = dict(self.config)
            job = {"config": config, "url": page.url, "title": str(page.title), "content": page.content or "",
                   "meta": {k: page.meta[k] for k in meta if k in page.meta},
                   "toc": [_toc_tokens(i) for i in page.toc],
                   "jieba_dict_user": os.path.abspath(config["jieba_dict_user"]) if config.get("jieba_dict_user") else None}
            self.entries.append(pagepool.DeferredEntries(pool.submit(pagepool.search_entries, job), key, job))
            return
        start = len(self.entries)
        original(self, page)
        _stage_put("search", key, self.entries[start:])

    def generate_search_index(self, prev):
        deferred = pagepool.DeferredEntries
        if any(isinstance(e, deferred) for e in self.entries):
            self.entries = [x for e in self.entries for x in (e.entries(log) if isinstance(e, deferred) else [e])]
        return original_generate(self, prev)

    add_entry_from_context._handbook_cached = True
    index_cls.add_entry_from_context = add_entry_from_context
    index_cls.generate_search_index = generate_search_index


# print-site (the one-page edition) prefixes the id of every heading, footnote and list item with
# its page's key. Its update_anchor_ids finds them with <([^\s]+).*?id="…".*?>, which scans every
# tag to the end of its line: on a page of build-time math (lines of tens of KB) one call took 30 s,
# and the edition's build took 441 s where the site's took 7. The same rule, bounded by the tag:
_PRINT_ANCHOR = re.compile(r'<(h[1-6]|sup|li)(\s[^>]*?)?\sid="([^"]*)"')


def _print_update_anchor_ids(page_html: str, page_key: str) -> str:
    return _PRINT_ANCHOR.sub(lambda m: f'<{m.group(1)}{m.group(2) or ""} id="{page_key}-{m.group(3)}"', page_html)


def _patch_print_site() -> None:
    from mkdocs_print_site_plugin import urls

    if not callable(getattr(urls, "update_anchor_ids", None)) or "update_anchor_ids(" not in Path(urls.__file__).read_text():
        raise PluginError("mkdocs-print-site-plugin no longer has urls.update_anchor_ids, which tools/hooks.py "
                          "replaces (fix: check the new version's anchor handling and update _patch_print_site)")
    urls.update_anchor_ids = _print_update_anchor_ids


@event_priority(100)  # before the search plugin, which fails obscurely without jieba
def on_config(config):
    if any(name == "print-site" and plugin.config.get("enabled") for name, plugin in config["plugins"].items()):
        _patch_print_site()
    try:
        import jieba  # noqa: F401  (imported only to prove it is importable)
    except ImportError:
        raise PluginError("jieba is not importable, so Chinese text would not be segmented for search "
                          "(fix: install the pinned requirements: `make setup`, or "
                          "`pip install --require-hashes -r requirements.txt`)") from None
    missing = [src for src, _ in VENDOR if not (ROOT / "node_modules" / src).exists()]
    if missing:
        raise PluginError(
            f"self-hosted front-end assets are missing: node_modules/{missing[0]} "
            "(fix: run `npm ci` in the repository root, or use `make build`, which does it)"
        )
    glossary = yaml.safe_load((ROOT / "data" / "glossary.yml").read_text(encoding="utf-8"))["terms"]
    lines = [f"*[{t['abbr']}]: {t['zh']}（{t['en']}）" if t.get("zh") else f"*[{t['abbr']}]: {t['en']}"
             for t in glossary if t.get("abbr")]
    config["_handbook_abbr"] = "\n\n" + "\n".join(lines) + "\n"
    config["_handbook_glossary"] = glossary
    _cache_search_entries()
    instant_nav.configure(config)
    _cheap_notebook_toc()
    _cache_markdown_render(config)
    # mkdocs-jupyter caches its conversion by the notebook (here the executed copy) and its own
    # options; the folder is per version of it and of nbconvert, so an upgrade converts afresh.
    jupyter = config["plugins"].get("mkdocs-jupyter")
    if jupyter is not None and not getattr(jupyter.should_include, "_handbook", False):
        # mkdocs-jupyter parses every Markdown page with jupytext (twice per build) to look for
        # notebook front matter; the handbook's labs are only .ipynb files under notebooks/.
        original_include = jupyter.should_include

        def should_include(file, _original=original_include):
            return bool(file.abs_src_path) and file.abs_src_path.endswith(".ipynb") and _original(file)

        should_include._handbook = True
        jupyter.should_include = should_include
    if jupyter is not None:
        jupyter.config["cache"] = True
        jupyter.config["cache_dir"] = str(STAGE_CACHE / "nbconvert" / _stage_key(_versions("mkdocs-jupyter", "nbconvert"))[:12])
    return config


def _glossary_page(terms: list[dict]) -> str:
    rows = [f"| {t.get('abbr', '')} | {t['en']} | {t['zh']} |" for t in sorted(terms, key=lambda t: (t.get("abbr") or t["en"]).lower())]
    return "\n".join([
        "---", "title: 术语表", "description: 全站缩写与术语的中英对照；同一份数据生成每页的缩写悬停提示。",
        "tags:", "  - 资源", "---", "", "# 术语表", "",
        "本表由仓库的 `data/glossary.yml` 生成；表中的缩写在每一页第一次出现时带悬停提示（把鼠标停在带下划线的缩写上即可看到全称）。"
        "新增术语请改那个文件。", "", "| 缩写 | 英文 | 中文 |", "|---|---|---|", *rows, ""])


_pending_labs: dict[str, str] = {}  # src_uri -> why the page shows the lab without outputs
_to_submit: list[Path] = []  # labs to execute in the background once the build is written


def _lab_policy() -> str:
    """LABS_EXECUTE: '1' (default) executes every lab missing from the cache before the build goes on,
    several at a time; 'background' (make serve) shows the cached ones executed and the others
    unexecuted with a banner while they run in the background; '0' executes none."""
    value = os.environ.get("LABS_EXECUTE", "1")
    if value not in ("0", "1", "background"):
        raise PluginError(f"LABS_EXECUTE={value!r} is not one of 1, 0, background (fix: unset it, or use one of those)")
    return value


@event_priority(50)  # before mkdocs-jupyter wraps .ipynb files (priority 0)
def on_files(files, config):
    policy = _lab_policy()
    pagepool.begin_build()
    # mkdocs-jupyter wraps Files and reads abs_src_path through src_dir, so every lab is laid out
    # under one folder that mirrors notebooks/: the executed copy, or the source while it is pending.
    render_dir = labs.CACHE_DIR / "render"
    _lab_sources.clear()
    _pending_labs.clear()
    _to_submit.clear()
    lab_files, clashes = [], []
    for nb in labs.iter_notebooks():
        src_uri = nb.relative_to(labs.NOTEBOOKS).as_posix()
        _lab_sources[src_uri] = nb
        lab_file = File(src_uri, src_dir=str(render_dir), dest_dir=config["site_dir"],
                        use_directory_urls=config["use_directory_urls"])
        # mkdocs-jupyter gives a lab the URL a Markdown page of the same name would get, and the
        # later file silently overwrites the other: a page `reduce.md` beside a lab `reduce.ipynb`.
        twin = PurePosixPath(src_uri).with_suffix("")
        clash = files.get_file_from_path(f"{twin}.md") or files.get_file_from_path(f"{twin}/index.md")
        if clash is not None:
            clashes.append(f"{labs.rel(nb)} and {Path(config['docs_dir']).name}/{clash.src_uri} would both be published "
                           f"at /{clash.url} and one would hide the other (fix: rename the lab to "
                           f"{Path(src_uri).with_name(Path(src_uri).stem + '-lab.ipynb').as_posix()}, or the page)")
        lab_files.append(lab_file)
    if clashes:  # checked before any lab runs: executing them first would only delay the message
        raise PluginError("\n".join(clashes))
    sources = [_lab_sources[f.src_uri] for f in lab_files]
    executed: dict[Path, Path] = {}
    if policy == "1":
        for nb, result in labs.execute_many(sources).items():
            if isinstance(result, labs.LabError):
                raise PluginError(str(result))
            executed[nb] = result
    else:
        runner = labs.background() if policy == "background" else None
        for nb in sources:
            hit = labs.cached(nb)
            if hit is not None:
                executed[nb] = hit
            elif runner is not None:
                _to_submit.append(nb)  # started after the build, so the first preview is not slowed
                failure = runner.failed.get(nb)
                _pending_labs[labs.rel(nb)] = (
                    f"后台执行失败：{failure.splitlines()[0]}" if failure else
                    "预览服务器正在后台执行它，完成后页面会自动刷新，换成带输出的版本。")
            else:
                _pending_labs[labs.rel(nb)] = "这次构建没有执行实验（LABS_EXECUTE=0）。"
    dirty = [str(pr) for nb, copy in executed.items() for pr in labs.output_problems(copy, nb)]
    if dirty:  # the published page would show them: a build machine's paths, warnings
        raise PluginError("lab outputs that must not be published:\n" + "\n".join(dirty))
    for lab_file in lab_files:
        nb = _lab_sources[lab_file.src_uri]
        shown = executed.get(nb, nb)
        target = render_dir / lab_file.src_uri
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != shown.read_bytes():
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # builds may run side by side
            shutil.copyfile(shown, tmp)
            tmp.replace(target)
        files.append(lab_file)
    # The question bank's pages are generated from data/questions.yml (see tools/questions.py).
    try:
        bank = questions.load()
    except questions.BankError as exc:
        raise PluginError(str(exc)) from None
    for uri, markdown in questions.pages(bank).items():
        files.append(File.generated(config, uri, content=markdown))
    # The foundations' interview canon (data/canon/*.yml, tools/canon.py): a page, and the build stops on
    # a broken entry (unknown source, missing anchor, uncovered topic without a reason) naming file and line.
    problems = canon.check()
    if problems:
        raise PluginError("data/canon has problems:\n" + "\n".join(problems))
    for uri, markdown in canon.pages().items():
        files.append(File.generated(config, uri, content=markdown))
    files.append(File.generated(config, "resources/glossary.md", content=_glossary_page(config["_handbook_glossary"])))
    files.append(File.generated(config, wayin.CATALOGUE, content=wayin.lab_catalogue(sources, executed)))
    for src, dest in VENDOR:
        base = ROOT / "node_modules" / src
        for path in ([base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())):
            uri = dest if base.is_file() else f"{dest}/{path.relative_to(base).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


@event_priority(-100)  # after awesome-nav has built the navigation
def on_nav(nav, config, files):
    in_nav = {page.file.src_uri for page in nav.pages}
    docs = Path(config["docs_dir"])
    for file in files.documentation_pages():
        if file.src_uri in in_nav:
            continue
        folder = Path(file.src_uri).parent
        nav_file = (docs / folder / ".nav.yml").relative_to(ROOT) if docs.is_relative_to(ROOT) else folder / ".nav.yml"
        source = labs.rel(_lab_sources[file.src_uri]) if file.src_uri in _lab_sources else f"{docs.name}/{file.src_uri}"
        log.warning(f"{source} is not in the navigation, so readers cannot reach it. "
                    f"fix: add '{Path(file.src_uri).name}' to the nav list in {nav_file.as_posix()}")
    _convert_labs_ahead(nav, config)
    return nav


def _convert_labs_ahead(nav, config) -> None:
    """Hand the labs whose conversion is not cached to worker processes, in the order the build will
    reach them (tools/pagepool.py); on_page_markdown waits for a lab's worker before it is rendered."""
    from mkdocs_jupyter.plugin import _compute_cache_key, _get_cache_path

    jupyter = config["plugins"].get("mkdocs-jupyter")
    if jupyter is None or not jupyter.config["cache"] or pagepool.workers() <= 1:
        return
    options = {k: jupyter.config[k] for k in ("kernel_name", "theme", "allow_errors", "show_input", "no_input",
                                              "no_prompt", "remove_tag_config", "highlight_extra_classes",
                                              "include_requirejs", "custom_mathjax_url")}
    jobs = []
    for page in nav.pages:
        if not _is_lab(page.file) or page.file.src_uri not in _lab_sources:
            continue
        path = page.file.abs_src_path
        execute = jupyter.config["execute"] and not any(
            PurePosixPath(path).match(p) for p in jupyter.config["execute_ignore"] or ())
        cache_path = _get_cache_path(jupyter.config["cache_dir"], _compute_cache_key(path, jupyter.config, execute))
        why = _pending_labs.get(labs.rel(_lab_sources[page.file.src_uri]))
        if cache_path.exists():
            import json

            body = json.loads(cache_path.read_text(encoding="utf-8"))["content"]
            if 'class="mermaid"' in body or _stage_get("lab-pages", pagepool.lab_page_key(body, why)) is not None:
                continue
        jobs.append((page.file.src_uri, {"path": path, "cache_path": str(cache_path), "why": why,
                                         "nb2html": {"execute": execute, **options}}))
    if len(jobs) < 2:  # one lab converts faster here than a worker process starts
        return
    pool = pagepool.start()
    for src_uri, job in jobs:
        pool.labs[src_uri] = pool.submit(pagepool.convert_lab, job)


_BENCH_TABLE = re.compile(r"<!--\s*bench-table:\s*([a-z0-9-]+)/([a-z0-9-]+/[a-z0-9-]+)\s*-->")


def _bench_table(match: re.Match) -> str:
    """A table of a lab's GPU record at its largest size, written from data/bench/ at build time,
    so a page never carries a copy of a measured number that could go stale."""
    import json

    gpu, lab = match.group(1), match.group(2)
    base = ROOT / "data" / "bench" / gpu
    try:
        record = json.loads((base / f"{lab.replace('/', '-')}.json").read_text(encoding="utf-8"))
        copy = json.loads((base / "copy.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise PluginError(f"bench-table {gpu}/{lab}: no record {exc.filename} "
                          f"(fix: run `make bench` on that GPU, or correct the comment)") from None
    ceiling = max(r["gbps"] for r in copy["results"])
    largest = max(r["n"] for r in record["results"])
    labels = record.get("rung_labels", {})
    prov = record["provenance"]
    at_largest = {r["rung"]: r for r in record["results"] if r["n"] == largest}
    if record.get("metric") == "tflops":
        # compute-bound labs are judged by arithmetic throughput against the library rung they name
        reference = record.get("reference", {})
        rows = ["| 实现 | 时间（µs） | 吞吐（TFLOP/s） | 对照 | 占对照 |", "|---|---|---|---|---|"]
        for rung in labels or at_largest:
            r = at_largest.get(rung)
            if r is None:
                continue
            ref = at_largest.get(reference.get(rung, ""))
            share = f"{r['tflops'] / ref['tflops']:.0%}" if ref else "—"
            ref_label = labels.get(ref["rung"], ref["rung"]) if ref else "—"
            rows.append(f"| {labels.get(rung, rung)} | {r['time_ms'] * 1e3:.1f} | {r['tflops']:.0f} | {ref_label} | {share} |")
        head = f"\n\n{prov['gpu']}，n = {largest:,}，{record['results'][0]['dtype']}。"
    else:
        rows = ["| 实现 | 时间（µs） | 有效带宽（GB/s） | 占实测拷贝带宽 |", "|---|---|---|---|"]
        for r in sorted(at_largest.values(), key=lambda r: r["time_ms"]):
            rows.append(f"| {labels.get(r['rung'], r['rung'])} | {r['time_ms'] * 1e3:.1f} | {r['gbps']:.0f} | {r['gbps'] / ceiling:.0%} |")
        head = f"\n\n{prov['gpu']}，n = {largest:,}，{record['results'][0]['dtype']}；设备内拷贝实测 {ceiling:.0f} GB/s。"
    note = (head + f"驱动 {prov['driver']}，CUDA {prov['cuda_runtime']}，torch {prov['packages']['torch']}，"
            f"triton {prov['packages']['triton']}，{prov['date'][:10]}，提交 `{prov['commit'][:10]}`；"
            f"数据：`data/bench/{gpu}/{lab.replace('/', '-')}.json`（`{prov['command']}`）。")
    return "\n".join(rows) + note


def on_page_markdown(markdown, page, config, files):
    if _is_lab(page.file):
        pool = pagepool.current()
        if pool is not None and page.file.src_uri in pool.labs:  # its worker writes the caches render() reads
            pagepool.result(pool.labs.pop(page.file.src_uri), labs.rel(_lab_sources[page.file.src_uri]), log)
        return markdown
    markdown = _BENCH_TABLE.sub(_bench_table, markdown)
    markdown = measured.expand(markdown, f"docs/{page.file.src_uri}")
    markdown = wayin.page_markdown(markdown, page, config)
    # A page may define an abbreviation itself (UVM is a verification methodology on the chip-design
    # page, unified virtual memory elsewhere): the page's own definition wins over the glossary's.
    own = set(re.findall(r"^\*\[([^\]]+)\]:", markdown, flags=re.M))
    glossary = config["_handbook_abbr"]
    if own:
        glossary = "".join(line + "\n" for line in glossary.splitlines()
                           if not any(line.startswith(f"*[{a}]:") for a in own))
    return markdown + "\n\n" + glossary


def _static_diagrams(html: str, page) -> str:
    """Mermaid fences become inline SVG rendered at build time (tools/diagrams.py)."""
    global _diagrams
    if 'class="mermaid"' not in html:
        return html
    if _diagrams is None:
        _diagrams = diagrams.Renderer()
        if not _diagrams.enabled:
            log.info("no Chromium: Mermaid diagrams are rendered in the reader's browser "
                     "(install Debian's chromium, or set CHROMIUM, to inline them as SVG at build time)")
    if not _diagrams.enabled:
        return html
    where = labs.rel(_lab_sources[page.file.src_uri]) if page.file.src_uri in _lab_sources else f"docs/{page.file.src_uri}"
    try:
        return _diagrams.replace_fences(html, where)
    except diagrams.DiagramError as exc:
        raise PluginError(str(exc)) from None


# Vulgar-fraction characters. pymdownx.smartsymbols turns "1/2" into "½" unless its `fractions`
# option is off, which rewrote "ZeRO-1/2/3" as "ZeRO-½/3"; a page may show one only if its source has it.
_FRACTIONS = re.compile("[\u00bc-\u00be\u2150-\u215e]")


def _check_fractions(html: str, page) -> None:
    stray = set(_FRACTIONS.findall(html)) - set(page.markdown or "") - set(page.file.content_string)
    if stray:
        raise PluginError(f"docs/{page.file.src_uri}: the rendered page has {''.join(sorted(stray))} that its Markdown "
                          "does not: a Markdown extension rewrote a fraction such as 1/2 (fix: keep "
                          "pymdownx.smartsymbols' fractions: false in mkdocs.yml, or write the character in the source)")


@event_priority(10)  # before print-site copies each page's content into the one-page edition
def on_page_content(html, page, config, files):
    html = _static_diagrams(html, page)
    if not _is_lab(page.file):
        _check_fractions(html, page)
        html = reader.page_html(html)  # before math is typeset: it splits rows of formulas (tools/reader.py)
        if katex_static.enabled():
            try:
                html = katex_static.render_page(html, f"docs/{page.file.src_uri}")
            except katex_static.MathError as exc:
                raise PluginError(str(exc)) from None
        return html
    # A lab repeats its identifiers in every code cell, so on term frequency alone it outranks the
    # page that explains the idea; halve its weight in the search index (the page links the lab).
    page.meta.setdefault("search", {"boost": 0.5})
    why = _pending_labs.get(labs.rel(_lab_sources[page.file.src_uri]))
    # Parsing a lab's HTML (outputs, images) is the slowest step of a rebuild: the result is cached
    # by the input, the banner and the code that does it (tools/pagepool.py), so an edit elsewhere
    # never repeats it; on a cold build a worker process has usually done it already.
    key = pagepool.lab_page_key(html, why)
    hit = _stage_get("lab-pages", key)
    if hit is not None:
        page.toc = get_toc(hit["toc"])
        return instant_nav.page_html(_with_run_note(hit["html"], _lab_sources[page.file.src_uri]))
    html, tokens = pagepool.lab_page(html, why)
    page.toc = get_toc(tokens)
    _stage_put("lab-pages", key, {"html": html, "toc": tokens})
    return instant_nav.page_html(_with_run_note(html, _lab_sources[page.file.src_uri]))


def _with_run_note(html: str, source: Path) -> str:
    """Under the lab's title: how to run it in Colab, whether a GPU helps and what changes with one
    (notebook metadata `accelerator` and `handbook.gpu`, written per lab)."""
    import html as html_mod
    import json

    meta = json.loads(source.read_text(encoding="utf-8")).get("metadata", {})
    gpu = (meta.get("handbook") or {}).get("gpu")
    if meta.get("accelerator") == "GPU" and gpu:
        body = ("“在 Colab 中打开”会给 CPU 运行时，内核在 Triton 与 Numba 的 CPU 解释器里运行，只验证正确性。"
                "要在 GPU 上运行：菜单“代码执行程序 → 更改运行时类型”，硬件加速器选 GPU（免费档是 T4，sm_75），"
                "保存后从头运行。" + html_mod.escape(gpu) +
                "需要更新的 GPU 特性（bf16 从 sm_80 起、fp8 从 sm_89 起、TMA 与 wgmma 在 sm_90）的档位在较小的 GPU 上"
                "跳过，并打印一行原因。")
        title = "在 Colab 上运行：CPU 或 GPU"
    else:
        body = ("本实验只用 CPU：“在 Colab 中打开”后用默认运行时从头运行即可。第一个单元格会取来本实验用到的仓库文件，"
                "并补装缺少的包。")
        title = "在 Colab 上运行"
    note = (f'<div class="admonition tip lab-run-note"><p class="admonition-title">{title}</p><p>{body}</p></div>')
    at = html.find("</h1>")
    return html[:at + 5] + note + html[at + 5:] if at >= 0 else note + html


def on_page_context(context, page, config, nav):
    if not _is_lab(page.file):
        return context
    source = labs.rel(_lab_sources[page.file.src_uri])
    repo = config["repo_url"].rstrip("/")
    branch = config["extra"].get("lab_branch", "main")
    owner_repo = urlparse(repo).path.strip("/")
    # GitHub's edit page of a notebook is its raw JSON: "edit" opens the rendered notebook instead
    # (overrides/partials/lab-buttons.html says how to change it; Material's own buttons are hidden on labs)
    page.edit_url = f"{repo}/blob/{branch}/{source}"
    page.meta["lab"] = {
        "colab": f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/{source}",
        "github": f"{repo}/blob/{branch}/{source}",
        "download": Path(source).name,
        "source": source,
    }
    return context


# Material 9.8's search worker segments a Chinese query against the index's words, but its loop
# stops one character short of the query's end: "共享内存" becomes "共享* 内*" even though
# "共享内存" is an indexed word, and the last character is lost. Allowing the full length fixes
# it. The pattern is asserted, so an upgrade of Material that changes the worker fails loudly.
_SEGMENT_BUG = "for(let o=s+1;o<t.length;o++)t.slice(s,o)in e"
_SEGMENT_FIX = "for(let o=s+1;o<=t.length;o++)t.slice(s,o)in e"


def _patch_search_worker(site_dir: Path) -> None:
    workers = sorted((site_dir / "assets" / "javascripts" / "workers").glob("search.*.min.js"))
    if len(workers) != 1:
        raise PluginError(f"expected one Material search worker, found {len(workers)}: re-check tools/hooks.py")
    text = workers[0].read_text(encoding="utf-8")
    if text.count(_SEGMENT_BUG) != 1:
        raise PluginError("Material's search worker changed: check whether its Chinese query segmentation "
                          "still drops the last character, then update or remove _patch_search_worker in tools/hooks.py")
    workers[0].write_text(text.replace(_SEGMENT_BUG, _SEGMENT_FIX), encoding="utf-8")


# Material fetches the whole search index on every page load (its bundle creates the index
# observable eagerly, and search highlighting subscribes to it at once). The index is the
# heaviest thing a page would load, and most readers never search, so the bundle is rewritten to
# take the index from window.__handbookSearchIndex() (overrides/main.html), a promise that starts
# the request only when the search box gets focus or the search toggle opens. The file: protocol
# keeps Material's own loader. The pattern is asserted, so an upgrade that changes it fails loudly;
# tests/test_browser.py asserts that no page requests the index before search is used.
_LAZY_INDEX = re.compile(r'(\w+)=document\.forms\.namedItem\("search"\)\?(\w+)\(\):(\w+)')


def _patch_lazy_search(site_dir: Path) -> None:
    bundles = sorted((site_dir / "assets" / "javascripts").glob("bundle.*.min.js"))
    if len(bundles) != 1:
        raise PluginError(f"expected one Material bundle, found {len(bundles)}: re-check _patch_lazy_search in tools/hooks.py")
    text = bundles[0].read_text(encoding="utf-8")
    if "window.__handbookSearchIndex()" in text:  # a dirty rebuild kept the patched copy
        return
    matches = _LAZY_INDEX.findall(text)
    if len(matches) != 1:
        raise PluginError("Material's bundle changed: the search index is no longer created by the expression "
                          "_patch_lazy_search rewrites, so every page would fetch the whole index again. Find how "
                          "the new bundle loads search/search_index.json, then update _LAZY_INDEX in tools/hooks.py")
    text = _LAZY_INDEX.sub(lambda m: (f'{m[1]}=document.forms.namedItem("search")?(location.protocol==="file:"||'
                                      f'!window.__handbookSearchIndex?{m[2]}():window.__handbookSearchIndex()):{m[3]}'), text)
    bundles[0].write_text(text, encoding="utf-8")


def _compact_search_index(site_dir: Path) -> None:
    """Material writes the index with every CJK character escaped as a 6-byte ASCII sequence;
    the same JSON in UTF-8 is about 40 % smaller raw and 10 % smaller gzip-compressed."""
    import json

    index = site_dir / "search" / "search_index.json"
    if index.exists():
        data = json.loads(index.read_text(encoding="utf-8"))
        index.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def on_build_error(error):
    pagepool.close()
    _close_diagrams()


def _close_diagrams():
    global _diagrams
    katex_static.close()
    if _diagrams is not None:
        if _diagrams.rendered:
            log.info(f"rendered {_diagrams.rendered} Mermaid diagram(s) to SVG (cached in {labs.rel(diagrams.CACHE)})")
        _diagrams.close()
    _diagrams = None


_SECTION = re.compile(r'<section class="print-page" id="([^"]+)"')


def _fix_print_page_anchors(site_dir: Path) -> None:
    """print-site prefixes every in-page link with its page's id (#page-anchor) but leaves some
    targets unprefixed (h1 ids, code-line anchors): give those targets the id their links use."""
    page = site_dir / "print_page" / "index.html"
    if not page.exists():
        return
    text = page.read_text(encoding="utf-8")
    wanted = set(re.findall(r'href="#([^"]+)"', text))
    present = set(re.findall(r'\sid="([^"]+)"', text))
    starts = [(m.start(), m.group(1)) for m in _SECTION.finditer(text)] + [(len(text), None)]
    out = [text[:starts[0][0]]]
    for (begin, sid), (end, _) in zip(starts, starts[1:]):
        chunk = text[begin:end]

        def fix(m: re.Match, sid=sid) -> str:
            target = f"{sid}-{m.group(2)}"
            if m.group(2).startswith(f"{sid}-") or target not in wanted or target in present:
                return m.group(0)
            return f'{m.group(1)}id="{target}"'

        out.append(re.sub(r'(\s)id="([^"]+)"', fix, chunk))
    # print-site also "prefixes" the lightbox link around each lab figure, whose href is the image
    # itself (data:image/png;base64,...): the result is an 8 KB anchor to nothing. The figure stays;
    # its link goes (the edition has no lightbox, and PDF readers reject names that long)
    text = re.sub(r'(<a class="glightbox"[^>]*?)\shref="#[^"]*"', r"\1", "".join(out))
    # one fragment, one spelling: a link written percent-encoded (#roofline-%E6%A8%A1%E5%9E%8B) and
    # one written in UTF-8 reach the same heading in a browser, but the PDF names its destinations
    # by the spelling, so an encoded link into another part of the PDF found no destination
    text = re.sub(r'href="#([^"]*%[0-9A-Fa-f]{2}[^"]*)"', lambda m: f'href="#{escape(unquote(m.group(1)))}"', text)
    page.write_text(text, encoding="utf-8")


_STYLE = re.compile(r"<style[^>]*>.*?</style>", re.S)


def _dedupe_print_styles(site_dir: Path) -> None:
    """Every lab brings the same inline Jupyter stylesheets (about 0.6 MB); the one-page edition
    copies each lab's, so at 50 labs it held 30 MB of identical CSS and Chromium spent minutes
    applying it before `make pdf` could print. Keep the first copy of each identical block."""
    page = site_dir / "print_page" / "index.html"
    if not page.exists():
        return
    seen: set[str] = set()

    def keep_first(m: re.Match) -> str:
        if m.group(0) in seen:
            return ""
        seen.add(m.group(0))
        return m.group(0)

    page.write_text(_STYLE.sub(keep_first, page.read_text(encoding="utf-8")), encoding="utf-8")


@event_priority(-100)  # after the search plugin has written its index
def on_post_build(config):
    pagepool.close()
    _close_diagrams()
    if _to_submit:
        runner = labs.background()
        for nb in _to_submit:
            runner.submit(nb)
        log.info(f"{len(_to_submit)} lab(s) shown without outputs are executing in the background "
                 f"({labs.jobs()} at a time); their pages refresh when each is done")
    _fix_print_page_anchors(Path(config["site_dir"]))
    _dedupe_print_styles(Path(config["site_dir"]))
    wayin.strip_from_print_page(Path(config["site_dir"]))
    _patch_search_worker(Path(config["site_dir"]))
    _patch_lazy_search(Path(config["site_dir"]))
    try:  # synonyms (data/search-synonyms.yml) and the no-hit suggestions' terms
        searchindex.finalize(Path(config["site_dir"]))
        searchindex.patch_worker(Path(config["site_dir"]))
        instant_nav.patch_bundle(Path(config["site_dir"]))
    except (searchindex.SearchDataError, instant_nav.BundleError) as exc:
        raise PluginError(str(exc)) from None
    _compact_search_index(Path(config["site_dir"]))
    # The download button serves the clean source (no outputs), like the Colab button, but pinned to
    # the commit the site was built from: opened alone, it fetches the repository files of that commit.
    commit = _build_commit()
    for src_uri, nb in _lab_sources.items():
        page_dir = Path(config["site_dir"]) / Path(src_uri).with_suffix("")
        page_dir.mkdir(parents=True, exist_ok=True)
        text = nb.read_text(encoding="utf-8")
        if commit:
            text = text.replace('LAB_REF = \\"main\\"', f'LAB_REF = \\"{commit}\\"', 1)
        (page_dir / nb.name).write_text(text, encoding="utf-8")


def _build_commit() -> str | None:
    """The commit being built: GITHUB_SHA in the deploy workflow, else the checkout's HEAD."""
    import subprocess

    sha = os.environ.get("GITHUB_SHA")
    if not sha:
        try:
            sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                 timeout=10).stdout.strip()
        except OSError:
            sha = ""
    return sha if re.fullmatch(r"[0-9a-f]{40}", sha or "") else None


def on_shutdown():
    pagepool.close()
    # `make serve` stopped: labs still queued for the background are dropped (a running one finishes).
    if labs._background is not None:
        labs._background.pool.shutdown(wait=False, cancel_futures=True)


def on_serve(server, config, builder):
    for folder in ("notebooks", "data", "tools", "overrides"):
        server.watch(str(ROOT / folder))
    # a lab executed in the background (LABS_EXECUTE=background) writes here when it is done
    done = labs.CACHE_DIR / "done"
    done.mkdir(parents=True, exist_ok=True)
    server.watch(str(done))
    return server
