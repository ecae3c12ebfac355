"""Labs (notebooks/<section>/<slug>.ipynb): the shared setup cell, source checks, and cached execution.

The build (tools/hooks.py), the checks (tools/checks.py), the tests and `make labs-sync` all use
this module, so the rules for a lab live in one place.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
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
_CWD_RELATIVE = re.compile(r"Path\.cwd\(\)|os\.getcwd\(\)|\.parents\[\d+\]")
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


def setup_template() -> str:
    return SETUP_TEMPLATE.read_text(encoding="utf-8").rstrip("\n")


# ----------------------------------------------------------------------------- what a lab needs

CODE_SECTIONS = sorted(p.name for p in (ROOT / "code").iterdir() if p.is_dir()) if (ROOT / "code").is_dir() else []
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import|import[ \t]+([\w.]+(?:[ \t]*,[ \t]*[\w.]+)*))", re.M)
_STRING = re.compile(r"""(?<![\w])["']([\w./+-]+)["']""")
_PATH_JOIN = re.compile(r"""[\"'](?:code|data|bench|tools)[\"'](?:\s*/\s*[\"'][\w.+-]+[\"'])+""")
_REPO_PATH = re.compile(r"^(?:code|data|bench|tools)/[\w./+-]+\.\w+$")


_FROM_NAMES = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+\(?([\w, \t\n]+?)\)?[ \t]*(?:#.*)?$", re.M)
# Imported only on a GPU that has them, behind a find_spec check: never installed for a lab (a CUDA 13
# build of cuda-bindings on an older driver would break the lab instead of skipping the rung).
OPTIONAL_DISTS = {"cuda-bindings", "cuda-core", "cuda-pathfinder", "ipython"}
# Packages a lab needs that no import names: numba's CUDA target lives in numba-cuda.
IMPLIED_DISTS = {"numba": ["numba-cuda"]}


def _imports(code: str) -> list[str]:
    names = []
    for pkg, members in _FROM_NAMES.findall(code):  # `from bench.experiments import x` may name a submodule
        if not pkg.startswith("."):
            names += [f"{pkg}.{m.split(' as ')[0].strip()}" for m in members.replace("\n", " ").split(",") if m.strip()]
    for frm, imp in _IMPORT.findall(code):
        if frm:
            if not frm.startswith("."):
                names.append(frm)
        else:
            names += [n.strip().split(" as ")[0] for n in imp.split(",")]
    return names


def _lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK_FILE.read_text(encoding="utf-8").splitlines() if LOCK_FILE.exists() else []:
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


_DISTS: dict[str, list[str]] | None = None


def _distributions(module: str) -> list[str]:
    global _DISTS
    if _DISTS is None:
        from importlib import metadata

        _DISTS = metadata.packages_distributions()
    return _DISTS.get(module, [])


def lab_needs(path: Path, nb: dict | None = None) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """The repository files a lab reads and the third-party packages it imports, found by reading its
    code and, transitively, the repository modules it imports (`make labs-sync` writes both into the
    setup cell, so a lab opened alone in Colab can fetch the files and install the pinned packages).

    A module name resolves against the folders a piece of code can put on sys.path: its own folder,
    the repository root (for `bench`, `tools`) and any code/<section> whose name appears as a string
    literal. Repository paths written as string literals (`lab_file("data/…/x.json")`) are included
    when the file exists; `metadata.handbook.files` in the notebook adds what no literal names
    (an f-string path is fetched on first use by lab_file anyway)."""
    nb = nb if nb is not None else load(path)
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"
             and SETUP_TAG not in c.get("metadata", {}).get("tags", [])]
    files: set[str] = set()
    third: set[str] = set()
    stdlib = set(sys.stdlib_module_names)
    pending: list[tuple[str, Path | None]] = [("\n".join(_source(c) for c in cells), None)]
    seen: set[Path] = set()
    while pending:
        code, where = pending.pop()
        dirs = [where.parent] if where is not None else []
        dirs += [ROOT / "code" / s for s in CODE_SECTIONS if re.search(rf"[\"'](?:code/)?{s}[\"']", code)]
        dirs.append(ROOT)
        for lit in _STRING.findall(code):
            if _REPO_PATH.match(lit) and (ROOT / lit).is_file():
                files.add(lit)
        for m in _PATH_JOIN.finditer(code):  # ROOT / "data" / "hardware" / "gpus.yml" in a module
            joined = "/".join(re.findall(r"[\"']([\w.+-]+)[\"']", m.group(0)))
            if (ROOT / joined).is_file():
                files.add(joined)
        for name in _imports(code):
            parts = name.split(".")
            found = False
            for d in dirs:
                for k in range(len(parts), 0, -1):
                    stem = d.joinpath(*parts[:k])
                    hits = [stem.with_suffix(".py")] if stem.with_suffix(".py").is_file() else []
                    hits += [stem / "__init__.py"] if (stem / "__init__.py").is_file() else []
                    # a package's __init__ runs before its submodule: include each level's __init__
                    hits += [d.joinpath(*parts[:j], "__init__.py") for j in range(1, k)
                             if d.joinpath(*parts[:j], "__init__.py").is_file()]
                    if hits:
                        found = True
                        for h in hits:
                            files.add(h.relative_to(ROOT).as_posix())
                            if h not in seen:
                                seen.add(h)
                                pending.append((h.read_text(encoding="utf-8"), h))
                        break
            if not found and parts[0] not in stdlib and parts[0] != "__future__":
                third.add(parts[0])
    extra = nb.get("metadata", {}).get("handbook", {}).get("files", [])
    for pattern in extra:
        matches = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern) if p.is_file())
        files.update(matches or [pattern])
    pins = _lock_pins()
    packages: dict[str, tuple[str, str]] = {}
    for module in sorted(third):
        for dist in _distributions(module):
            key = dist.lower().replace("_", "-")
            if key in pins and key not in OPTIONAL_DISTS:
                packages[key] = (pins[key], module)
                for implied in IMPLIED_DISTS.get(key, []):
                    if implied in pins:
                        packages[implied] = (pins[implied], implied.replace("-", "_"))
    for dist in nb.get("metadata", {}).get("handbook", {}).get("packages", []):
        key = dist.lower().replace("_", "-")
        if key in pins:
            packages.setdefault(key, (pins[key], key.replace("-", "_")))
    return sorted(files), dict(sorted(packages.items()))


def setup_source(path: Path | None = None, nb: dict | None = None) -> str:
    """The setup cell of one lab: the shared template with the lab's own file and package lists."""
    text = setup_template()
    files, packages = lab_needs(path, nb) if path is not None else ([], {})
    flist = "LAB_FILES = [" + "".join(f"\n    {f!r}," for f in files) + ("\n]" if files else "]")
    plist = "LAB_PACKAGES = {" + "".join(f"\n    {d!r}: {v!r}," for d, v in packages.items()) + ("\n}" if packages else "}")
    return (text.replace("LAB_FILES = []  # @lab-files", flist)
                .replace("LAB_PACKAGES = {}  # @lab-packages", plist))


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
    elif _source(first).rstrip("\n") != setup_source(path, nb):
        problems.append(Problem(
            name, None, "the setup cell differs from tools/lab_setup.py (edited by hand or stale)",
            "edit tools/lab_setup.py instead (or the lab's code, if its file or package list changed), "
            "then run `make labs-sync` to rewrite every lab's setup cell",
        ))
    for i, cell in code_cells[1:]:
        m = _CWD_RELATIVE.search(_source(cell))
        if m:
            line = _source(cell)[:m.start()].count("\n") + 1
            problems.append(Problem(
                name, None, f"cell {i + 1}, line {line}: `{m.group(0)}` finds the repository relative to the working "
                "directory, which fails when the lab is opened alone (Colab has only the notebook)",
                "use LAB_ROOT (the repository, or the folder the setup cell fetched the lab's files into), "
                "lab_path(\"code/…\") for a file and lab_file(\"data/…\") for its text",
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
             "metadata": {"tags": [SETUP_TAG]}, "outputs": [], "source": setup_source(path, nb)}
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
        # Not "__main__": a lab that spawns processes (gloo ranks) would have each child re-run the whole
        # generated module as its main module; under another name the children import only what they need.
        return runpy.run_path(str(module), run_name="__lab__")
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


# ----------------------------------------------------------------------------- a lab opened alone

_AUDIT_START = "import sys as _s; _HANDBOOK_BEFORE = set(_s.modules)"
_AUDIT_END = """import json as _j, sys as _s
from importlib import metadata as _m
_top = sorted({n.split('.')[0] for n in set(_s.modules) - _HANDBOOK_BEFORE})
_d = _m.packages_distributions()
print('HANDBOOK-AUDIT ' + _j.dumps(sorted({d for n in _top for d in _d.get(n, [])})))"""


def serve_repo():
    """A loopback HTTP server for the repository's tracked files (as the raw-file host serves them);
    returns (server, base_url). The caller shuts it down."""
    import functools
    import http.server
    import subprocess

    try:
        tracked = set(subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout.split("\0"))
    except (OSError, subprocess.CalledProcessError):
        tracked = None

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            rel_path = self.path.split("?", 1)[0].lstrip("/")
            if tracked is not None and rel_path not in tracked:
                self.send_error(404, "not a tracked file of the repository")
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(ROOT)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _dist_closure(names: set[str]) -> set[str]:
    """The distributions `names` install, with everything they require (extras left out)."""
    from importlib import metadata

    seen: set[str] = set()
    todo = [n.lower().replace("_", "-") for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in reqs:
            if "extra ==" in req:
                continue
            m = re.match(r"[A-Za-z0-9_.-]+", req)
            if m:
                todo.append(m.group(0).lower().replace("_", "-"))
    return seen


# What a fresh Jupyter kernel loads before any lab code (Colab's kernel has the same), and what Colab
# ships and the setup cell never replaces: not a lab's undeclared dependency.
KERNEL_DISTS = {"ipykernel", "ipython", "jupyter-client", "jupyter-core", "traitlets", "tornado", "pyzmq",
                "comm", "debugpy", "matplotlib-inline", "prompt-toolkit", "pygments", "jedi", "parso",
                "decorator", "stack-data", "executing", "asttokens", "pure-eval", "wcwidth", "psutil",
                "nest-asyncio", "platformdirs", "python-dateutil", "six", "pexpect", "ptyprocess", "packaging",
                "ipywidgets", "widgetsnbextension", "jupyterlab-widgets"}


# Libraries that torch, numba, jax or scikit-learn import when they happen to be installed (tqdm,
# opt-einsum, ml-dtypes, scipy …) and that Colab's image ships: a lab loads them without naming them.
COLAB_PROVIDED = {"scipy", "tqdm", "opt-einsum", "ml-dtypes", "pandas", "requests", "pyyaml", "pillow", "sympy",
                  "networkx", "jinja2", "fsspec", "filelock", "mpmath", "markupsafe", "typing-extensions",
                  "urllib3", "certifi", "idna", "charset-normalizer", "pytz", "tzdata", "rich", "markdown-it-py",
                  "mdurl", "cloudpickle", "narwhals", "setuptools", "jaraco.context", "jaraco.functools",
                  "jaraco.text", "more-itertools", "backports.tarfile", "triton", "scikit-learn", "joblib",
                  "threadpoolctl", "flatbuffers", "protobuf"}


def execute_alone(path: Path, base_url: str, workdir: Path, *, timeout: int = CELL_TIMEOUT_S) -> dict:
    """Run a lab the way Colab does: the notebook copied alone into an empty folder, `google.colab`
    imported when the kernel starts, the repository's files reachable only through LAB_REPO_RAW, no
    package installed (LAB_NO_INSTALL=1: every package the lab declares must already be present).
    Returns {"ok", "seconds", "error", "undeclared"}: `undeclared` lists distributions the lab loaded
    that its setup cell does not declare (nor anything they require, nor the kernel's own)."""
    import shutil
    import time

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    folder = workdir / "content"
    folder.mkdir(parents=True)
    shutil.copy(path, folder / path.name)
    stub = workdir / "stub" / "google" / "colab"  # no google/__init__.py: google.protobuf still imports
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('"""Stands in for Colab\'s module in the tests."""\n', encoding="utf-8")
    (stub / "output.py").write_text('"""jax imports it when google.colab is loaded."""\n', encoding="utf-8")
    startup = workdir / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-colab.py").write_text("import google.colab  # noqa: F401\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM")}
    env.update({"PYTHONPATH": str(workdir / "stub"), "IPYTHONDIR": str(workdir / "ipython"),
                "LAB_REPO_RAW": base_url, "LAB_REPO_DIR": str(workdir / "repo-files"), "LAB_NO_INSTALL": "1",
                "MPLBACKEND": "Agg"})
    nb = nbformat.read(folder / path.name, as_version=4)
    setup_at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(setup_at + 1, nbformat.v4.new_code_cell(_AUDIT_START))
    nb.cells.append(nbformat.v4.new_code_cell(_AUDIT_END))
    start = time.monotonic()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(folder)}})
    result = {"ok": True, "error": None, "undeclared": []}
    try:
        client.execute(env=env)
    except (CellExecutionError, CellTimeoutError) as exc:
        result.update(ok=False, error="\n".join(str(exc).strip().splitlines()[-8:]))
    result["seconds"] = round(time.monotonic() - start, 1)
    setup_text = _source(nb.cells[setup_at])
    printed = "".join(o.get("text", "") for o in nb.cells[setup_at].get("outputs", []) if o.get("output_type") == "stream")
    if "缺少或版本不同的包" in printed:
        result.update(ok=False, error=(result["error"] or "") + "\nsetup cell: " + printed.strip())
    audit = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "stream")
    m = re.search(r"HANDBOOK-AUDIT (\[.*\])", audit)
    if m:
        declared = set(re.findall(r"^    '([^']+)': \(", setup_text, flags=re.M))
        allowed = _dist_closure(declared | {"torch", "numpy"}) | KERNEL_DISTS | OPTIONAL_DISTS | COLAB_PROVIDED
        result["undeclared"] = sorted(d.lower().replace("_", "-") for d in json.loads(m.group(1))
                                      if d.lower().replace("_", "-") not in allowed)
    return result


# An absolute path of the machine that executed the lab (its home, a temporary folder, a virtual
# environment), or a warning on stderr: neither belongs on a published page.
_ABS_PATH = re.compile(r"(?<![\w.~-])/(?:work|tmp|root|home|Users|usr|opt|var|private|mnt|srv)/[\w.+-]")
_WARNING = re.compile(r"\b[A-Z]?\w*Warning\b|IProgress not found")


def output_problems(executed: Path, source: Path) -> list[Problem]:
    """What an executed lab would publish that it must not: a machine's absolute paths in any output,
    a warning in stderr. Named by cell and output line, with the fix."""
    nb = load(executed)
    problems: list[Problem] = []
    for i, cell in enumerate(nb.get("cells", []), 1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text, stderr = _source({"source": out.get("text", "")}), out.get("name") == "stderr"
            elif out.get("output_type") in ("execute_result", "display_data"):
                text, stderr = _source({"source": out.get("data", {}).get("text/plain", "")}), False
            else:
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if stderr and _WARNING.search(line):
                    problems.append(Problem(rel(source), None, f"cell {i}, output line {n} is a warning: {line.strip()[:120]}",
                                            "fix its cause; if a library the lab cannot change raises it, filter that "
                                            "one warning where it is raised, with a comment saying why"))
                elif _ABS_PATH.search(line):
                    problems.append(Problem(rel(source), None, f"cell {i}, output line {n} shows a path of the machine "
                                            f"that ran it: {line.strip()[:120]}",
                                            "print paths relative to LAB_ROOT, or only a temporary file's name"))
    return problems


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
    """`python -m tools.labs sync|check|run|alone|plain [NB ...]` (alone: as Colab opens it, see execute_alone)"""
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
    if cmd == "alone":
        import tempfile

        server, base = serve_repo()
        failed = 0
        try:
            for p in paths:
                with tempfile.TemporaryDirectory(prefix="lab-alone-") as tmp:
                    res = execute_alone(p, base, Path(tmp))
                ok = res["ok"] and not res["undeclared"]
                failed += not ok
                print(f"{'PASS' if ok else 'FAIL'} {res['seconds']:6.1f} s  {rel(p)}"
                      + (f"\n    {res['error']}" if res["error"] else "")
                      + (f"\n    undeclared packages: {res['undeclared']}" if res["undeclared"] else ""))
        finally:
            server.shutdown()
        return 1 if failed else 0
    if cmd == "plain":
        for p in paths:
            run_plain(p)
            print(f"ran {rel(p)} as a plain Python program: every cell passed")
        return 0
    print("usage: python -m tools.labs sync|check|run|alone|plain [notebooks/<section>/<slug>.ipynb ...]")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
