"""Every Python snippet in README.md and docs/ parses, and every name it imports exists: a module that moved or a
function that was renamed fails here, not in a reader's hands."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Modules that exist only inside Triton's Python-backend stub, where a repository's model.py runs.
STUB_ONLY = {"triton_python_backend_utils", "_appliance_site"}


def snippets() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for match in FENCE.finditer(text):
            line = text[: match.start()].count("\n") + 2
            found.append((f"{doc.relative_to(REPO)}:{line}", match.group(1)))
    return found


def imports(source: str) -> list[tuple[str, str | None]]:
    """(module, name) for each imported name; name None for ``import module``."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def test_the_docs_have_python_snippets() -> None:
    assert len(snippets()) >= 5


@pytest.mark.parametrize("where, source", snippets(), ids=[w for w, _ in snippets()])
def test_every_import_in_a_snippet_exists(where: str, source: str) -> None:
    for module, name in imports(source):
        if module.split(".")[0] in STUB_ONLY:
            continue
        assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
        if name is None or name == "*":
            continue
        loaded = importlib.import_module(module)
        exists = hasattr(loaded, name) or importlib.util.find_spec(f"{module}.{name}") is not None
        assert exists, f"{where}: {module} has no {name}"
