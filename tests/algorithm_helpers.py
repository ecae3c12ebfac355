"""Shared loader for the algorithm-layer listings under code/algorithm/ (not a test module)."""
from __future__ import annotations

import importlib.util
import sys

from conftest import ROOT


def load_listing(name: str, file: str):
    """Import code/algorithm/<file> as module <name> and register it in sys.modules."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "code" / "algorithm" / file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
