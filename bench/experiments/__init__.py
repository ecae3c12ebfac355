"""GPU experiments behind the runtime, driver, framework and compiler pages.

Each module `bench/experiments/<name>.py` (names not starting with `_`) measures one mechanism on
a real GPU and defines:

- `TITLE`: one line saying what it measures;
- `USED_BY`: the pages and labs that show its record (repository-relative paths);
- `run(torch) -> dict`: the measurement, which checks its own results (a copy equals its source,
  a replayed graph equals eager) before timing them, and returns JSON-serialisable results.

`python -m bench.experiments [NAME ...]` (GPU only) runs each in its own process and writes
`data/records/<gpu>/<name>.json` with the provenance of `python -m bench`. Pages and labs read the
records with `load(name)`; on a machine without a GPU they show the committed record, and a lab
on a GPU measures live with the same `run`.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "data" / "records"
DEFAULT_GPU = "nvidia-h200"


def names() -> list[str]:
    return sorted(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith("_"))


def load(name: str, gpu: str = DEFAULT_GPU) -> dict:
    """The committed record of experiment `name` on `gpu` (results + provenance)."""
    path = RECORDS / gpu / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path.relative_to(ROOT)}: no record; run `python -m bench.experiments {name}` on a GPU")
    return json.loads(path.read_text(encoding="utf-8"))
