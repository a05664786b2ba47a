"""scripts/ imports nothing from tests/: a script runs from a checkout on its own, and what it shares with the tests
lives in the package (appliance.harness, appliance.harness.localbroker). Read from the source with ``ast``: every
import (inside functions too), and every change of ``sys.path`` or ``PYTHONPATH`` that names tests/, directly or
through a variable; the shell scripts for a ``PYTHONPATH`` that does. Reading a file under tests/ as data (a test
model copied into a repository) is neither."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
TESTS = REPO / "tests"


def names_under_tests() -> set[str]:
    """Top-level module names that resolve under tests/ once it (or one of its folders, as pytest does) is on
    sys.path: ``tests``, its packages (``support``) and the modules beside the tests (``mqtt_helpers``...)."""
    names = {"tests"} | {p.name for p in TESTS.iterdir() if (p / "__init__.py").exists()}
    for path in [*TESTS.glob("*.py"), *TESTS.glob("*/*.py")]:
        if not (path.parent / "__init__.py").exists():
            names.add(path.stem)
    return names


def _names_tests(node: ast.AST, tainted: set[str]) -> bool:
    """Whether ``node`` holds the string "tests" (a path part) or a variable assigned from one."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "tests" in re.split(r"[/\\]", sub.value):
            return True
        if isinstance(sub, ast.Name) and sub.id in tainted:
            return True
    return False


def _tainted(tree: ast.AST) -> set[str]:
    """Variables assigned a value that names tests/ (``TESTS = REPO / "tests"``), to a fixed point."""
    tainted: set[str] = set()
    while True:
        found = {target.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
                 and node.value is not None and _names_tests(node.value, tainted)
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(target, ast.Name)}
        if found <= tainted:
            return tainted
        tainted |= found


def _is_sys_path(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


def _changes_path(node: ast.AST) -> bool:
    """sys.path.insert/append/extend(...), sys.path[...] = ..., site.addsitedir(...), or a statement that sets
    PYTHONPATH (an environment for a child, os.environ)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in ("insert", "append", "extend") and _is_sys_path(node.func.value):
            return True
        if node.func.attr == "addsitedir":
            return True
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(_is_sys_path(t) for t in targets):
            return True
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)  # not a def or a block around one
    return isinstance(node, simple) and any(isinstance(sub, ast.Constant) and sub.value == "PYTHONPATH"
                                            for sub in ast.walk(node))


def violations(source: str, where: str, names: set[str]) -> list[str]:
    """What in ``source`` (a Python file of scripts/) imports from or path-inserts tests/."""
    tree = ast.parse(source, where)
    tainted = _tainted(tree)
    found = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        found += [f"{where}:{getattr(node, 'lineno', '?')}: imports {m}" for m in modules if m.split(".")[0] in names]
        if _changes_path(node) and _names_tests(node, tainted):
            found.append(f"{where}:{getattr(node, 'lineno', '?')}: puts tests/ on the import path")
    return sorted(set(found))


def test_no_script_imports_or_path_inserts_tests() -> None:
    names = names_under_tests()
    assert {"support", "mqtt_helpers", "ota_helpers"} <= names  # the reader sees what tests/ offers
    scripts = sorted(SCRIPTS.rglob("*.py"))
    assert len(scripts) >= 8
    found = [v for path in scripts for v in violations(path.read_text(), str(path.relative_to(REPO)), names)]
    for path in sorted(SCRIPTS.rglob("*.sh")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"PYTHONPATH=\S*tests", line):
                found.append(f"{path.relative_to(REPO)}:{n}: puts tests/ on PYTHONPATH")
    assert found == []


def test_an_import_or_a_path_insert_of_tests_is_caught() -> None:
    names = names_under_tests()
    caught = {
        "import support.mosquitto": 1,
        "from support.wait import wait_until": 1,
        "def f():\n    from mqtt_helpers import frame": 1,
        "sys.path.insert(0, str(REPO / 'tests'))": 1,
        "TESTS = REPO / 'tests'\nSUPPORT = TESTS / 'support'\nsys.path[:0] = [str(SUPPORT)]": 1,
        "env = {**os.environ, 'PYTHONPATH': str(ROOT / 'tests')}": 1,
    }
    for source, count in caught.items():
        assert len(violations(source, "x.py", names)) == count, source
    allowed = [
        "SLOW = ROOT / 'tests' / 'triton' / 'models' / 'slow'\nshutil.copytree(SLOW, repo / 'slow')",
        "sys.path.insert(0, str(ROOT))",
        "from appliance.harness.rtsp import RtspServer",
        "from soakcheck import growth",
    ]
    for source in allowed:
        assert violations(source, "x.py", names) == [], source
