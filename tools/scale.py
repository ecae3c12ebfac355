"""A synthetic copy of the handbook at the size it is growing to, for `make bench-site SCALE=1`.

`python -m tools.scale DEST [--pages 200] [--labs 60]` copies the project's sources to DEST (nothing
is written inside the repository), then adds pages and labs until the site has the requested
numbers: each added page is a copy of a real page of the same section (so it has the same mix of
prose, tables, code, snippets, formulas and diagrams, and its relative links stay valid), each added
lab is a small real notebook (the shared setup cell, a NumPy computation checked by an assertion, a
matplotlib figure, a formula). The copies are listed in their section's .nav.yml, so the strict
build accepts them. Every copy differs from its original by a marker line, so the caches treat it
as a page of its own.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPY = ["docs", "notebooks", "overrides", "tools", "data", "code", "bench", "mkdocs.yml", ".autocorrectrc",
        "requirements.txt", "package.json"]


def _pages(docs: Path) -> list[Path]:
    return sorted(p for p in docs.rglob("*.md") if p.name not in ("index.md", "tags.md"))


def _nav_add(nav: Path, names: list[str]) -> None:
    text = nav.read_text(encoding="utf-8").rstrip("\n")
    nav.write_text(text + "\n" + "".join(f"  - {n}\n" for n in names), encoding="utf-8")


def _lab(index: int, setup: str) -> dict:
    code = (f"import numpy as np\nimport matplotlib.pyplot as plt\n\nrng = np.random.default_rng({index})\n"
            "x = rng.standard_normal((256, 64)).astype(np.float32)\n"
            "m = x.max(axis=1, keepdims=True)\np = np.exp(x - m)\np /= p.sum(axis=1, keepdims=True)\n"
            "np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)\n"
            "print('每行的和为 1：', bool(np.allclose(p.sum(axis=1), 1.0)))\n\n"
            "fig, ax = plt.subplots(figsize=(5, 3))\nax.hist(p.max(axis=1), bins=32)\n"
            "ax.set_xlabel('max probability')\nplt.show()\n")
    cells = [
        {"cell_type": "markdown", "id": "title", "metadata": {},
         "source": f"# 实验：规模测试 {index}\n\n按行做 softmax，验证 $\\sum_j p_{{ij}} = 1$。"},
        {"cell_type": "code", "id": "lab-setup", "metadata": {"tags": ["setup"]}, "outputs": [],
         "execution_count": None, "source": setup},
        {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": "## 计算与检查"},
        {"cell_type": "code", "id": "c1", "metadata": {}, "outputs": [], "execution_count": None, "source": code},
    ]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                        "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}


def make(dest: Path, pages: int = 200, labs: int = 60) -> dict:
    sys.path.insert(0, str(ROOT))
    from tools import labs as labs_mod

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    (dest / "node_modules").symlink_to(ROOT / "node_modules")
    docs = dest / "docs"
    existing_pages = len(list(docs.rglob("*.md")))
    originals = _pages(docs)
    added_pages: dict[Path, list[str]] = {}
    i = 0
    while existing_pages + sum(len(v) for v in added_pages.values()) < pages:
        src = originals[i % len(originals)]
        n = i // len(originals) + 1
        target = src.with_name(f"{src.stem}-scale-{n}.md")
        text = src.read_text(encoding="utf-8")
        head, sep, body = text.partition("\n---\n")
        target.write_text(head + sep + f"\n<!-- scale copy {n} of {src.name} -->\n" + body, encoding="utf-8")
        added_pages.setdefault(src.parent, []).append(target.name)
        i += 1
    for folder, names in added_pages.items():
        _nav_add(folder / ".nav.yml", names)
    existing_labs = len(labs_mod.iter_notebooks(dest / "notebooks"))
    setup = labs_mod.setup_source()
    lab_dir = dest / "notebooks" / "operator"
    names = []
    for k in range(max(0, labs - existing_labs)):
        path = lab_dir / f"scale-lab-{k + 1:02d}.ipynb"
        path.write_text(json.dumps(_lab(k + 1, setup), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        labs_mod.sync(path)  # the setup cell's file and package lists, as for a real lab
        names.append(path.name)
    if names:
        _nav_add(docs / "operator" / ".nav.yml", names)
    return {"pages": existing_pages + sum(len(v) for v in added_pages.values()),
            "labs": existing_labs + len(names), "dest": str(dest)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--labs", type=int, default=60)
    args = parser.parse_args(argv)
    info = make(args.dest, args.pages, args.labs)
    print(f"wrote {info['dest']}: {info['pages']} Markdown pages, {info['labs']} labs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
