"""A module of scripts/ loaded by its path, for the tests of a script's logic: scripts/ holds programs run from a
checkout (``python scripts/soak.py``), not a package, and the scripts import nothing from tests/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py, loaded once as the module ``name`` (as the script beside it imports it)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"no script {name} in {SCRIPTS}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module
