"""The way in: what the home page links only when the build made it, and the lab catalogue.

- Offline edition. The home page has the marker OFFLINE_MARK where its links to the one-page
  edition (print_page/) and the PDF go. They are written only when this build makes the edition,
  i.e. the print-site plugin is enabled (HANDBOOK_PRINT=true: `make pdf` and the deploy workflow,
  whose next step prints print_page/ into handbook.pdf, see tools/pdf.py); otherwise the marker
  disappears and the page promises nothing. The footer does the same (overrides/partials/copyright.html).
- Lab catalogue (resources/labs.md, generated): every notebook under notebooks/, grouped by chapter in
  navigation order, with its title and link, what it asserts, how long it ran and what a GPU adds.
  * what it asserts: `metadata.handbook.asserts` of the notebook, else data/labs.yml, else the first
    sentence of the lab's first Markdown cell, so a new lab is listed without any other edit;
  * run time: the executed copy's `metadata.handbook.execution_seconds`, written by
    tools/labs.execute when the build runs the lab (CPU mode in CI), and the seconds the H200
    gpu-check record (data/gpu-check/nvidia-h200.json, `make gpu-check`) gives the lab in GPU mode;
  * GPU: notebook metadata `accelerator: GPU` and the `handbook.gpu` sentence (the same sentence the
    lab page's "在 Colab 上运行" note shows).
tools/hooks.py calls lab_catalogue() in on_files, page_markdown() in on_page_markdown and
strip_from_print_page() in on_post_build.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
ASSERTS = ROOT / "data" / "labs.yml"
GPU_CHECK = ROOT / "data" / "gpu-check" / "nvidia-h200.json"
CATALOGUE = "resources/labs.md"
OFFLINE_MARK = "<!-- handbook:offline-edition -->"


# ------------------------------------------------------------------ offline edition

def offline_edition(config) -> str | None:
    """The PDF's path when this build makes the one-page edition (print-site enabled), else None."""
    plugin = config["plugins"].get("print-site")
    if plugin is None or not plugin.config.get("enabled"):
        return None
    return plugin.config.get("path_to_pdf") or "handbook.pdf"


def offline_links(pdf: str, prefix: str = "") -> str:
    # print-site-plugin-ignore: the one-page edition does not link to itself
    return (f'<p class="offline-edition print-site-plugin-ignore">离线阅读：'
            f'<a href="{prefix}print_page/">单页版</a>（全书在一页里，可直接打印）· '
            f'<a href="{prefix}{pdf}">PDF</a>（带书签）</p>')


_OFFLINE_BLOCK = re.compile(r'<p class="offline-edition print-site-plugin-ignore">.*?</p>', re.S)


def strip_from_print_page(site_dir: Path) -> None:
    """The one-page edition does not link to itself: print-site turns print_page/ into an in-page
    anchor that nothing answers (tools/pdf.py checks every in-page link), so the block goes."""
    edition = Path(site_dir) / "print_page" / "index.html"
    if edition.exists():
        text = edition.read_text(encoding="utf-8")
        stripped = _OFFLINE_BLOCK.sub("", text)
        if stripped != text:
            edition.write_text(stripped, encoding="utf-8")


def page_markdown(markdown: str, page, config) -> str:
    if OFFLINE_MARK not in markdown:
        return markdown
    pdf = offline_edition(config)
    if pdf is None:
        return markdown.replace(OFFLINE_MARK, "")
    # links relative to the page's URL ("" for the home page, "a/b/" two levels down)
    return markdown.replace(OFFLINE_MARK, offline_links(pdf, "../" * page.url.count("/")))


# ------------------------------------------------------------------ lab catalogue

def _nav(folder: Path) -> dict:
    path = folder / ".nav.yml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _title(nb: dict, path: Path) -> str:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


_CHECKS = ("断言", "对照", "相等", "等于", "验证", "检查", "核对", "比较", "一致")
_POINTERS = ("原理见", "背景见", "代码在", "公式与推导见", "原理与", "机制与")


def first_sentence(nb: dict) -> str:
    """A line for a lab that has none in data/labs.yml: from its first Markdown cell (prose and list
    items, not headings, tables or code), the first sentence that says what is checked, else the first
    one that is not a pointer to another page; links are reduced to their text."""
    cell = next((c for c in nb.get("cells", []) if c.get("cell_type") == "markdown"), None)
    if cell is None:
        return ""
    units: list[str] = []
    fence = False
    for line in _source(cell).splitlines():
        text = line.strip()
        if text.startswith("```"):
            fence = not fence
            continue
        if fence or not text or text.startswith(("#", "|", "<")):
            continue
        text = re.sub(r"^(?:\d+\.|[-*])\s+", "", text)
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("**", "")
        units += [u.strip() for u in re.findall(r"[^。！？]+[。！？]?", text) if u.strip()]
    units = [u.rstrip("；;，,：:") + ("" if u[-1] in "。！？" else "。") for u in units if len(u) > 8]
    plain = [u for u in units if not u.startswith(_POINTERS)]
    pick = next((u for u in plain if any(k in u for k in _CHECKS)), plain[0] if plain else (units[0] if units else ""))
    if len(pick) > 150:
        pick = pick[:148]
        if pick.count("$") % 2:
            pick = pick[:pick.rfind("$")]
        pick = pick.rstrip("，、；：（ ") + "……"
    return pick


def _asserts_data(known: set[str]) -> dict[str, str]:
    try:
        data = yaml.safe_load(ASSERTS.read_text(encoding="utf-8")) if ASSERTS.exists() else {}
    except yaml.YAMLError as exc:
        raise PluginError(f"data/labs.yml is not valid YAML: {exc}") from None
    entries = (data or {}).get("asserts") or {}
    if not isinstance(entries, dict) or not all(isinstance(v, str) and v.strip() for v in entries.values()):
        raise PluginError("data/labs.yml: 'asserts' must map notebooks/<section>/<slug> (without .ipynb) to one line of text")
    stale = sorted(set(entries) - known)
    if stale:
        raise PluginError(f"data/labs.yml names labs that do not exist: {', '.join(stale)} "
                          "(fix: rename the key to the lab's notebooks/<section>/<slug>, or remove the line)")
    return entries


def _gpu_check() -> tuple[dict[str, float], str | None]:
    """Seconds per notebook in GPU mode from the H200 gpu-check record (only the items that passed), and its date."""
    if not GPU_CHECK.exists():
        return {}, None
    record = json.loads(GPU_CHECK.read_text(encoding="utf-8"))
    seconds = {r["item"]: float(r["seconds"]) for r in record.get("results", [])
               if r.get("ok") and isinstance(r.get("seconds"), (int, float))}
    dates = sorted(r["date"][:10] for r in record.get("results", []) if r.get("date"))
    return seconds, (dates[-1] if dates else None)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


def lab_rows(sources: list[Path], executed: dict[Path, Path]) -> list[dict]:
    """One dict per lab: section, slug, title, link (docs-relative), asserts, cpu seconds, mode, cores, gpu."""
    known = {p.relative_to(NOTEBOOKS).with_suffix("").as_posix() for p in sources}
    data = _asserts_data(known)
    gpu_seconds, _ = _gpu_check()
    rows = []
    for path in sources:
        key = path.relative_to(NOTEBOOKS).with_suffix("").as_posix()
        nb = json.loads(path.read_text(encoding="utf-8"))
        meta = nb.get("metadata", {})
        own = meta.get("handbook") or {}
        run = {}
        copy = executed.get(path)
        if copy is not None:
            run = json.loads(copy.read_text(encoding="utf-8")).get("metadata", {}).get("handbook") or {}
        rows.append({
            "key": key, "section": key.split("/")[0], "slug": path.stem, "title": _title(nb, path),
            "link": f"{key}.ipynb",
            "asserts": own.get("asserts") or data.get(key) or first_sentence(nb),
            "seconds": run.get("execution_seconds"), "mode": run.get("mode"), "cores": run.get("cpu_count"),
            "gpu": meta.get("accelerator") == "GPU", "gpu_note": own.get("gpu"),
            "h200_seconds": gpu_seconds.get(f"notebooks/{key}.ipynb"),
        })
    return rows


def _ordered(rows: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """(section, its title, its labs) in the site's navigation order; labs in their chapter's nav order."""
    top = [s for s in (_nav(DOCS).get("nav") or []) if isinstance(s, str) and (DOCS / s).is_dir()]
    sections = top + sorted({r["section"] for r in rows} - set(top))
    out = []
    for section in sections:
        mine = [r for r in rows if r["section"] == section]
        if not mine:
            continue
        nav = _nav(DOCS / section)
        order = {name: i for i, name in enumerate(n for n in (nav.get("nav") or []) if isinstance(n, str))}
        mine.sort(key=lambda r: (order.get(f"{r['slug']}.ipynb", len(order)), r["slug"]))
        out.append((section, nav.get("title") or section, mine))
    return out


def lab_catalogue(sources: list[Path], executed: dict[Path, Path]) -> str:
    """The Markdown of resources/labs.md."""
    rows = lab_rows(sources, executed)
    _, gpu_date = _gpu_check()
    ran = [r for r in rows if isinstance(r["seconds"], (int, float))]
    cores = sorted({r["cores"] for r in ran if r["cores"]})
    modes = {r["mode"] for r in ran}
    total = sum(r["seconds"] for r in ran)
    with_gpu = sum(r["gpu"] for r in rows)
    on_h200 = [r for r in rows if r["h200_seconds"] is not None]
    core_text = "、".join(str(c) for c in cores) or "?"
    mode_text = "CPU 模式" if modes <= {"cpu"} else "GPU 模式" if modes == {"gpu"} else "CPU 与 GPU 模式"
    lines = [
        "---",
        "title: 实验目录",
        "description: 全部实验一览：每个实验断言什么、在 CPU 上跑多久、有 GPU 时多做什么，按章节排列并链接到实验页面。",
        "tags:",
        "  - 实验",
        "  - 资源",
        "---",
        "",
        "# 实验目录",
        "",
        f"本站共有 {len(rows)} 个实验（Jupyter 笔记本），放在各章里、挨着它们讲解的页面。每个实验在 CPU 上从头运行，"
        "用断言对照参考实现、公式或仓库里的测量记录；"
        f"其中 {with_gpu} 个有 GPU 路径：在 GPU 上改用更大的规模并现场计时，没有 GPU 时内核在 Triton 与 Numba 的 CPU 解释器里运行，只验证正确性。"
        "本页在构建时由实验本身生成，新实验自动出现在这里。",
        "",
        "怎样读这张表：",
        "",
        "- **它断言什么**：实验里的断言检查的是什么、对照的是什么。取自实验元数据的 `handbook.asserts` 或仓库的 "
        "`data/labs.yml`，两处都没有时取实验第一个单元格的第一句。",
        f"- **用时**：这次构建执行该实验的墙钟时间（{mode_text}，{core_text} 核的机器；构建按核数同时执行几个实验，"
        f"所以单个实验的用时含相互争用）。{len(ran)} 个实验合计 {_seconds(total)}。",
    ]
    if on_h200:
        lines.append(f"- **H200**：`make gpu-check` 在一块 H200 上以 GPU 模式从头运行该实验的时间（`data/gpu-check/nvidia-h200.json`，"
                     f"{gpu_date}），{len(on_h200)} 个实验有这项记录。GPU 模式的规模更大，还要现场计时，所以常比 CPU 模式更久。")
    lines += [
        "- **GPU 上多做什么**：实验在 GPU 上比在 CPU 上多做的事，与实验页面顶部“在 Colab 上运行”提示里的说明相同。"
        "打开 GPU 运行时的方法见那条提示。",
        "",
        "没有执行的实验（`LABS_EXECUTE=0` 的构建，或预览时尚在后台执行）用时一栏写“未执行”。",
        "",
    ]
    for section, title, labs in _ordered(rows):
        lines += [f"## {title}", "", "| 实验 | 它断言什么 | 用时 | GPU 上多做什么 |", "|---|---|---|---|"]
        for r in labs:
            name = r["title"].removeprefix("实验：")
            if isinstance(r["seconds"], (int, float)):
                took = _seconds(r["seconds"]) + ("（GPU 模式）" if r["mode"] == "gpu" else "")
            else:
                took = "未执行"
            took = f'<span class="lab-time">{took}</span>'
            if r["h200_seconds"] is not None:
                took += f'<br><span class="lab-time">H200：{_seconds(r["h200_seconds"])}</span>'
            if r["gpu"]:
                gpu = r["gpu_note"] or "有 GPU 路径：在 GPU 上以更大的规模运行并计时。"
            else:
                gpu = "只用 CPU"
            lines.append(f"| [{_cell(name)}](../{r['link']}) | {_cell(r['asserts'])} | {took} | {_cell(gpu)} |")
        lines.append("")
    return "\n".join(lines)
