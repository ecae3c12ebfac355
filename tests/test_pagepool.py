"""The build's worker processes (tools/pagepool.py) produce what the serial path produces.

A cold build hands lab conversion, lab-page post-processing and search indexing to spawned workers;
these tests run the workers in real spawned processes and compare their output with mkdocs-jupyter's
own render and Material's own indexer run in this process."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import yaml

from tools import labs, pagepool

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "notebooks" / "compiler" / "dataflow-lab.ipynb"


class _Loader(yaml.SafeLoader):
    pass


for _prefix in ("!", "tag:yaml.org,2002:python/"):  # mkdocs.yml's !ENV and !!python tags: not needed here
    _Loader.add_multi_constructor(_prefix, lambda loader, suffix, node: None)


def _plugin_options(name: str) -> dict:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)
    for entry in config["plugins"]:
        if isinstance(entry, dict) and name in entry:
            return entry[name]
    raise AssertionError(f"{name} is not configured in mkdocs.yml")


@pytest.fixture(scope="module")
def pool(tmp_path_factory, monkeypatch_module):
    cache = tmp_path_factory.mktemp("stage-cache")
    monkeypatch_module.setenv("HANDBOOK_BUILD_CACHE", str(cache))  # inherited by the spawned workers
    monkeypatch_module.setattr(pagepool, "STAGE_CACHE", cache)
    p = pagepool.Pool(2)
    yield p
    pids = [proc.pid for proc in p.executor._processes.values()]
    p.close()
    assert pids and not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                            for pid in pids), "closing the pool left worker processes behind"


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _serial_render(path: Path) -> tuple[str, str | None]:
    """mkdocs-jupyter's own on_pre_page + render, cache off: the page the build makes without workers."""
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import File
    from mkdocs.structure.pages import Page
    from mkdocs_jupyter.plugin import NotebookFile, Plugin

    plugin = Plugin()
    errors, warnings = plugin.load_config({**_plugin_options("mkdocs-jupyter"), "cache": False})
    assert not errors and not warnings
    plugin.on_pre_build(config=None)
    config = MkDocsConfig()
    config.load_dict({"site_name": "t", "docs_dir": str(path.parent), "site_dir": "/tmp/unused"})
    file = NotebookFile(File(path.name, src_dir=str(path.parent), dest_dir="/tmp/unused", use_directory_urls=True),
                        use_directory_urls=True, site_dir="/tmp/unused")
    page = Page(None, file, config)
    plugin.on_pre_page(page, config, files=None)
    page.render(config, files=None)
    return page.content, page.title


def test_lab_conversion_in_a_worker_equals_the_plugins_own_render(pool, tmp_path):
    from mkdocs_jupyter.plugin import Plugin

    plugin = Plugin()
    plugin.load_config(_plugin_options("mkdocs-jupyter"))
    options = {k: plugin.config[k] for k in ("kernel_name", "theme", "allow_errors", "show_input", "no_input",
                                             "no_prompt", "remove_tag_config", "highlight_extra_classes",
                                             "include_requirejs", "custom_mathjax_url")}
    why = "这次构建没有执行实验（LABS_EXECUTE=0）。"
    cache_path = tmp_path / "nbconvert" / "lab.json"
    job = {"path": str(LAB), "cache_path": str(cache_path), "why": why, "nb2html": {"execute": False, **options}}
    out = pagepool.result(pool.submit(pagepool.convert_lab, job), labs.rel(LAB), logging.getLogger(__name__))
    assert out is not None, "the worker failed"

    content, title = _serial_render(LAB)
    cached = json.loads(cache_path.read_text(encoding="utf-8"))
    assert cached["content"] == content  # what mkdocs-jupyter reads on its cache hit
    assert cached["title"] == title == pagepool.notebook_title(LAB)[1]
    # ... and the post-processed page the hooks read from the "lab-pages" stage
    staged = pagepool.stage_get("lab-pages", pagepool.lab_page_key(content, why))
    html, tokens = pagepool.lab_page(content, why)
    assert staged == {"html": html, "toc": tokens}
    assert "本实验尚未执行" in html and tokens and tokens[0]["level"] == 1


def test_search_entries_in_a_worker_equal_materials_indexer(pool):
    import jieba
    from material.plugins.search.plugin import SearchIndex
    from mkdocs.structure.toc import get_toc

    options = _plugin_options("search")
    config = {"lang": options["lang"], "separator": options["separator"], "pipeline": options["pipeline"],
              "fields": {"title": {"boost": 1e3}, "text": {"boost": 1.0}, "tags": {"boost": 1e6}},
              "jieba_dict": None, "jieba_dict_user": str(ROOT / options["jieba_dict_user"])}
    toc = [{"level": 1, "id": "共享内存", "name": "共享内存", "children": [
        {"level": 2, "id": "bank-冲突", "name": "bank 冲突", "children": []}]}]
    content = ('<h1 id="共享内存">共享内存</h1><p>线程块内的线程通过共享内存交换数据，PagedAttention 不在这里。</p>'
               '<h2 id="bank-冲突">bank 冲突</h2><p>同一个 warp 的访存落在同一个 bank 时会串行化。</p>'
               '<pre data-search-exclude="true">code_is_not_indexed()</pre>')
    meta = {"tags": ["算子", "CUDA"], "search": {"boost": 0.5}}
    job = {"config": config, "url": "operator/shared-memory/", "title": "共享内存", "content": content,
           "meta": meta, "toc": toc, "jieba_dict_user": config["jieba_dict_user"]}
    out = pagepool.result(pool.submit(pagepool.search_entries, job), "search", logging.getLogger(__name__))
    assert out is not None, "the worker failed"

    jieba.load_userdict(config["jieba_dict_user"])
    index = SearchIndex(**config)
    index.add_entry_from_context(SimpleNamespace(meta=meta, content=content, toc=get_toc(toc),
                                                 url="operator/shared-memory/", title="共享内存"))
    assert out["entries"] == index.entries
    assert [e["location"] for e in index.entries] == ["operator/shared-memory/",  # the h1 is the page itself
                                                      "operator/shared-memory/#bank-冲突"]
    assert all(e["boost"] == 0.5 and e["tags"] == ["算子", "CUDA"] for e in index.entries)
    assert "code_is_not_indexed" not in json.dumps(out["entries"])


def test_a_failing_worker_hands_the_step_back_to_the_build(pool, tmp_path, caplog):
    job = {"path": str(tmp_path / "missing.ipynb"), "cache_path": str(tmp_path / "c.json"), "why": None,
           "nb2html": {}}
    with caplog.at_level(logging.DEBUG):
        out = pagepool.result(pool.submit(pagepool.convert_lab, job), "missing.ipynb", logging.getLogger("t"))
    assert out is None  # the build then converts in process and reports the error itself
    assert not (tmp_path / "c.json").exists()
    assert "worker failed" in caplog.text and "missing.ipynb" in caplog.text


def test_warnings_a_worker_logs_reach_the_build(caplog):
    class Done:
        def result(self):
            return {"logs": [("mkdocs.plugins.handbook", logging.WARNING, "a warning from a worker")], "x": 1}

    with caplog.at_level(logging.WARNING):
        out = pagepool.result(Done(), "job", logging.getLogger("t"))
    assert out == {"x": 1}
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("mkdocs.plugins.handbook", logging.WARNING, "a warning from a worker")]


def test_workers_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("HANDBOOK_BUILD_JOBS", "1")
    assert pagepool.workers() == 1 and pagepool.start() is None
    monkeypatch.delenv("HANDBOOK_BUILD_JOBS")
    import os

    assert pagepool.workers() == (os.cpu_count() or 1)
