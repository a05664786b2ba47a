"""Every exception class defined in appliance/ derives from appliance.errors.ApplianceError, and keeps the builtin
base it had, so that ``except ValueError`` (or ``OSError``...) written for it still catches it. Read from the source
with ``ast`` (no module is imported): a base is followed through the module's own classes and its imports, and a
class is an exception when its chain reaches a builtin exception."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from appliance.detector.prepost.errors import InputRejected
from appliance.diskspace import NotEnoughSpace
from appliance.errors import ApplianceError
from appliance.triton.errors import InferTimeoutError, InvalidArgumentError

PACKAGE = Path(__file__).resolve().parents[1] / "appliance"
BUILTIN = {name for name in dir(builtins)
           if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)}
Key = tuple[str, str]  # (module, class)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _read() -> tuple[dict[Key, list[Key | str]], int]:
    """Every class in the package: its bases, each an appliance class's key or a name outside (``builtins.X``...)."""
    classes: dict[Key, list[Key | str]] = {}
    files = sorted(PACKAGE.rglob("*.py"))
    for path in files:
        module, tree = _module_name(path), ast.parse(path.read_text())
        names: dict[str, str] = {}  # a name bound by an import -> "module.Name"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _imported(module, path.name == "__init__.py", node)
                names.update({a.asname or a.name: f"{source}.{a.name}" for a in node.names})
            elif isinstance(node, ast.Import):
                names.update({a.asname or a.name: a.name for a in node.names})
        own = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[(module, node.name)] = [_resolve(ast.unparse(b), module, own, names) for b in node.bases]
    return classes, len(files)


def _resolve(base: str, module: str, own: set[str], names: dict[str, str]) -> Key | str:
    if base in own:
        return (module, base)
    head, _, rest = base.partition(".")
    full = names.get(head, f"builtins.{head}" if head in BUILTIN and not rest else head) + (f".{rest}" if rest else "")
    if full.startswith("appliance."):
        found_module, _, name = full.rpartition(".")
        return (found_module, name)
    return full


def _reaches(key: Key, classes: dict[Key, list[Key | str]], goal: Key | None) -> bool:
    """``key``'s chain reaches ``goal`` (None: any builtin exception, or a name outside ending in Error)."""
    for base in classes.get(key, []):
        if isinstance(base, tuple):
            if base == goal or _reaches(base, classes, goal):
                return True
        elif goal is None and (base.startswith("builtins.") or base.endswith(("Error", "Exception"))):
            return True
    return False


def test_every_exception_class_in_the_package_derives_from_appliance_error() -> None:
    classes, files = _read()
    exceptions = [key for key in classes if _reaches(key, classes, None)]
    assert files > 250 and len(exceptions) > 80, (files, len(exceptions))  # the walk found the package's errors
    base = ("appliance.errors", "ApplianceError")
    assert [f"{m}.{c}" for m, c in exceptions if (m, c) != base and not _reaches((m, c), classes, base)] == []


def test_the_errors_keep_their_builtin_bases() -> None:
    with pytest.raises(ValueError):
        raise InputRejected("bad_input", "a frame of the wrong shape")
    assert issubclass(NotEnoughSpace, OSError) and issubclass(InvalidArgumentError, ValueError)
    assert issubclass(InferTimeoutError, TimeoutError)
    assert all(issubclass(c, ApplianceError) for c in (InputRejected, NotEnoughSpace, InferTimeoutError))
