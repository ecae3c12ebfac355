"""Labs (notebooks/<section>/<slug>.ipynb): the shared setup cell, source checks, and cached execution.

The build (tools/hooks.py), the checks (tools/checks.py), the tests and `make labs-sync` all use
this module, so the rules for a lab live in one place.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SETUP_TEMPLATE = ROOT / "tools" / "lab_setup.py"
LOCK_FILE = ROOT / "requirements.txt"
# HANDBOOK_LABS_CACHE lets a benchmark measure a cold build without deleting the real cache.
CACHE_DIR = Path(os.environ.get("HANDBOOK_LABS_CACHE") or ROOT / ".cache" / "labs")
SETUP_TAG = "setup"
# Per-cell execution limit; the whole-lab budget is asserted by the tests.
CELL_TIMEOUT_S = 600


@dataclass
class Problem:
    path: str
    line: int | None
    message: str
    fix: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}\n    fix: {self.fix}"


def rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def iter_notebooks(root: Path = NOTEBOOKS) -> list[Path]:
    return sorted(p for p in root.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def setup_source() -> str:
    return SETUP_TEMPLATE.read_text(encoding="utf-8").rstrip("\n")


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def check_source(path: Path) -> list[Problem]:
    """Problems of a committed notebook: invalid JSON, outputs, a stale or missing setup cell."""
    name = rel(path)
    try:
        nb = load(path)
    except json.JSONDecodeError as exc:
        return [Problem(name, exc.lineno, f"not valid JSON ({exc.msg})", "re-save the notebook from Jupyter")]
    problems: list[Problem] = []
    cells = nb.get("cells", [])
    code_cells = [(i, c) for i, c in enumerate(cells) if c.get("cell_type") == "code"]
    dirty = [i for i, c in code_cells if c.get("outputs") or c.get("execution_count") is not None]
    if dirty:
        problems.append(Problem(
            name, None,
            f"committed with outputs or execution counts in cell(s) {', '.join(str(i + 1) for i in dirty)}",
            "strip them with `make labs-sync` (the pre-commit hook does it on every commit)",
        ))
    no_id = [i for i, c in enumerate(cells) if not c.get("id")]
    if no_id and (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
        problems.append(Problem(
            name, None, f"cell(s) {', '.join(str(i + 1) for i in no_id)} have no id, so every conversion makes up "
            "a random one and the lab's page changes on every build",
            "run `make labs-sync`, which gives each such cell a stable id",
        ))
    first = code_cells[0][1] if code_cells else None
    if first is None or SETUP_TAG not in first.get("metadata", {}).get("tags", []):
        problems.append(Problem(
            name, None, "the first code cell is not the shared setup cell (tag 'setup')",
            "run `make labs-sync` to insert the setup cell generated from tools/lab_setup.py",
        ))
    elif _source(first).rstrip("\n") != setup_source():
        problems.append(Problem(
            name, None, "the setup cell differs from tools/lab_setup.py (edited by hand or stale)",
            "edit tools/lab_setup.py instead, then run `make labs-sync` to rewrite every lab's setup cell",
        ))
    if not cells or cells[0].get("cell_type") != "markdown" or not _source(cells[0]).lstrip().startswith("# "):
        problems.append(Problem(name, None, "the first cell must be Markdown starting with the lab's '# 标题'",
                                "add a Markdown cell '# 实验：…' at the top"))
    return problems


def _new_cell_id(index: int, cell: dict, taken: set[str]) -> str:
    """A stable id for a cell that has none (nbformat 4.5 requires them; without one nbconvert makes up a
    random id on every conversion, so the lab's page would change on every build)."""
    import hashlib

    digest = hashlib.sha256(f"{index}\0{_source(cell)}".encode()).hexdigest()
    for start in range(0, len(digest) - 8):
        cid = digest[start:start + 8]
        if cid not in taken:
            taken.add(cid)
            return cid
    raise RuntimeError("no free cell id")  # 56 candidates: unreachable in practice


def sync(path: Path) -> bool:
    """Rewrite the setup cell from the template and strip outputs. Returns True if the file changed."""
    nb = load(path)
    cells = nb.setdefault("cells", [])
    setup = {"cell_type": "code", "execution_count": None, "id": "lab-setup",
             "metadata": {"tags": [SETUP_TAG]}, "outputs": [], "source": setup_source()}
    idx = next((i for i, c in enumerate(cells) if c.get("cell_type") == "code"), None)
    if idx is not None and SETUP_TAG in cells[idx].get("metadata", {}).get("tags", []):
        cells[idx] = setup
    else:
        insert_at = 1 if cells and cells[0].get("cell_type") == "markdown" else 0
        cells.insert(insert_at, setup)
    taken = {c["id"] for c in cells if c.get("id")}
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
        if not cell.get("id"):
            cell["id"] = _new_cell_id(i, cell, taken)
    text = json.dumps(nb, ensure_ascii=False, indent=1) + "\n"
    if text != path.read_text(encoding="utf-8"):
        path.write_text(text, encoding="utf-8")
        return True
    return False


def as_module(path: Path, tags: set[str] | None = None) -> Path:
    """Write the lab's code cells (only those with one of `tags`, if given) to a .py file and return it.

    Triton's @jit reads a kernel's source from its file, so code that runs the cells outside
    Jupyter (the benchmarks, `python -m tools.labs plain`) runs this file; the notebook stays the
    only copy in the repository.
    """
    chunks = [f"# generated from {rel(path)}; do not edit"]
    for cell in load(path)["cells"]:
        cell_tags = set(cell.get("metadata", {}).get("tags", []))
        if cell.get("cell_type") == "code" and (tags is None or cell_tags & tags):
            chunks.append(f"# --- cell {cell.get('id', '?')} ---\n{_source(cell)}")
    name = rel(path).removeprefix("notebooks/").removesuffix(".ipynb").replace("/", "_").replace("-", "_")
    module = CACHE_DIR / "modules" / f"{name}{'' if tags is None else '_' + '_'.join(sorted(tags))}.py"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text("\n\n".join(chunks) + "\n", encoding="utf-8")
    return module


def run_plain(path: Path) -> dict:
    """Run every code cell in order as a plain Python program (no Jupyter needed), cwd = the lab's folder."""
    import runpy

    os.environ.setdefault("MPLBACKEND", "Agg")
    module = as_module(path)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        return runpy.run_path(str(module), run_name="__main__")
    finally:
        os.chdir(cwd)


_MODE: str | None = None


def lab_mode() -> str:
    """'gpu' or 'cpu', decided as the setup cell decides it (LAB_FORCE_CPU=1, or no working nvidia-smi)."""
    global _MODE
    if os.environ.get("LAB_FORCE_CPU") == "1":
        return "cpu"
    if _MODE is None:
        import shutil
        import subprocess

        smi = shutil.which("nvidia-smi")
        probe = subprocess.run([smi, "-L"], capture_output=True, text=True) if smi else None
        _MODE = "gpu" if probe is not None and probe.returncode == 0 and "GPU" in probe.stdout else "cpu"
    return _MODE


def cache_key(path: Path) -> str:
    """Changes when the notebook, the lock file (the environment), the interpreter or the mode changes.

    The mode is the one the lab will really run in, so a build and the tests on a machine without
    a GPU share one execution whether or not LAB_FORCE_CPU is set."""
    h = hashlib.sha256()
    h.update(path.read_bytes())
    h.update(LOCK_FILE.read_bytes() if LOCK_FILE.exists() else b"no-lock")
    h.update(f"{sys.version}|{platform.machine()}|mode={lab_mode()}".encode())
    return h.hexdigest()[:24]


def cached(path: Path) -> Path | None:
    """The executed copy of the lab as it is now, if the cache has one."""
    out = CACHE_DIR / f"{path.stem}-{cache_key(path)}.ipynb"
    return out if out.exists() else None


class LabError(RuntimeError):
    pass


def execute(path: Path, *, use_cache: bool = True) -> Path:
    """Execute a notebook in a fresh kernel (cwd = its folder) and return the executed copy.

    The executed copy is cached under .cache/labs/ by cache_key(); a cell error raises LabError
    naming the notebook, the cell and the fix.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    import time

    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    out = CACHE_DIR / f"{path.stem}-{cache_key(path)}.ipynb"
    if use_cache and out.exists():
        return out
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as exc:
        failing = next((i for i, c in enumerate(nb.cells)
                        if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))),
                       None)
        where = f"cell {failing + 1}" if failing is not None else "a cell"
        summary = str(exc).strip().splitlines()
        tail = "\n".join(summary[-6:])
        raise LabError(f"{rel(path)}: {where} failed while executing the lab:\n{tail}\n"
                       f"    fix: run it locally with `make lab NB={rel(path)}` and make every cell pass "
                       f"in CPU mode (LAB_FORCE_CPU=1)") from None
    # How long it took and in which mode, for the tests (which read the build's execution instead
    # of running every lab a second time) and for the README's lab-time figures.
    nb.metadata["handbook"] = {"execution_seconds": round(time.monotonic() - start, 2), "mode": lab_mode(),
                               "cpu_count": os.cpu_count()}
    for stale in CACHE_DIR.glob(f"{path.stem}-*.ipynb"):
        if stale != out:
            stale.unlink(missing_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    nbformat.write(nb, tmp)
    tmp.replace(out)
    return out


def jobs() -> int:
    """Labs executed at once: HANDBOOK_LAB_JOBS, else one per core (each lab is its own kernel process)."""
    return max(1, int(os.environ.get("HANDBOOK_LAB_JOBS") or os.cpu_count() or 1))


def _share_threads() -> None:
    """Labs side by side share the cores: each kernel gets its share of BLAS/OpenMP threads instead
    of every kernel starting one thread per core (oversubscribed thread pools spin and wait)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(max(1, (os.cpu_count() or 1) // jobs())))


def execute_many(paths: list[Path], *, use_cache: bool = True) -> dict[Path, Path | LabError]:
    """Execute labs in parallel (jobs() at a time); each result is the executed copy or the LabError."""
    def one(p: Path):
        try:
            return p, execute(p, use_cache=use_cache)
        except LabError as exc:
            return p, exc

    if len(paths) <= 1 or jobs() == 1:
        return dict(one(p) for p in paths)
    _share_threads()
    with ThreadPoolExecutor(max_workers=jobs(), thread_name_prefix="lab") as pool:
        return dict(pool.map(one, paths))


class Background:
    """Executes labs missing from the cache while `make serve` already shows the site.

    One instance per process (this module is imported once, while MkDocs reloads the hooks on every
    rebuild). When a lab finishes, a file under CACHE_DIR/done/ is written; the preview server
    watches that folder and rebuilds, and the rebuild finds the lab in the cache."""

    def __init__(self):
        _share_threads()
        self.pool = ThreadPoolExecutor(max_workers=jobs(), thread_name_prefix="lab-bg")
        self.pending: set[Path] = set()
        self.failed: dict[Path, str] = {}
        self.lock = threading.Lock()

    def submit(self, path: Path) -> None:
        with self.lock:
            if path in self.pending:
                return
            self.pending.add(path)
        self.pool.submit(self._run, path)

    def _run(self, path: Path) -> None:
        try:
            execute(path)
            self.failed.pop(path, None)
        except LabError as exc:
            self.failed[path] = str(exc)
            print(f"ERROR   -  {exc}", file=sys.stderr, flush=True)
        except Exception as exc:  # never let a background failure vanish silently
            self.failed[path] = repr(exc)
            print(f"ERROR   -  {rel(path)}: {exc!r}", file=sys.stderr, flush=True)
        finally:
            with self.lock:
                self.pending.discard(path)
            done = CACHE_DIR / "done"
            done.mkdir(parents=True, exist_ok=True)
            (done / f"{path.stem}.done").write_text(cache_key(path), encoding="utf-8")


_background: Background | None = None


def background() -> Background:
    global _background
    if _background is None:
        _background = Background()
    return _background


def main(argv: list[str]) -> int:
    """`python -m tools.labs sync|check|run|plain [NB ...]`"""
    cmd, *names = argv or ["check"]
    paths = [ROOT / n for n in names] if names else iter_notebooks()
    if cmd == "sync":
        for p in paths:
            if sync(p):
                print(f"rewrote {rel(p)}")
        return 0
    if cmd == "check":
        problems = [pr for p in paths for pr in check_source(p)]
        for pr in problems:
            print(pr)
        return 1 if problems else 0
    if cmd == "run":
        failed = 0
        for p, result in execute_many(paths, use_cache=False).items():
            if isinstance(result, LabError):
                failed += 1
                print(result)
            else:
                print(f"executed {rel(p)} -> {rel(result)}")
        return 1 if failed else 0
    if cmd == "plain":
        for p in paths:
            run_plain(p)
            print(f"ran {rel(p)} as a plain Python program: every cell passed")
        return 0
    print("usage: python -m tools.labs sync|check|run|plain [notebooks/<section>/<slug>.ipynb ...]")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
