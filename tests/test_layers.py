"""The packages of ``appliance`` stand in floors, and every import points down (README, "Layout"): a package imports
only packages on lower floors. A new package must be given its floor here; an import that runs back up fails.
Read from the source with ``ast`` (every import, including those inside functions and under TYPE_CHECKING)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "appliance"

# Lowest first. Within a floor, packages do not import each other.
FLOORS: list[set[str]] = [
    {"config", "logs", "procs", "sdnotify", "durable", "paths", "__init__"},   # the toolkit
    {"backoff", "analytics", "models", "triton"},                                # pure libraries, the C API
    {"processing", "capture", "mqtt"},                                           # frames in, messages out
    {"health", "modelrepo", "sparkplug"},                                      # sparkplug: a second MQTT face
    {"engines"},
    {"serving"},                                                                 # which model serves a frame
    {"ota"},
    {"appconfig"},                                                               # the whole config file
    {"supervisor"},
    {"bench"},
    {"commands"},                                                                # the CLI
    {"__main__"},
]
FLOOR = {package: n for n, floor in enumerate(FLOORS) for package in floor}


def _package(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0].removesuffix(".py")


def imports() -> list[tuple[str, str, str]]:
    """(importing package, imported package, where) for every import of another appliance package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _package(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] if node.module != "appliance" else [f"appliance.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "appliance" and len(parts) > 1 and parts[1] != source:
                    found.append((source, parts[1], f"{path.relative_to(REPO)}:{node.lineno}"))
    return found


def test_every_package_has_a_floor() -> None:
    packages = {_package(p) for p in PACKAGE.rglob("*.py")}
    assert packages - FLOOR.keys() == set(), "give each new package its floor in FLOORS"
    assert len(packages) >= 20


def upward(edges: list[tuple[str, str, str]]) -> list[str]:
    """The imports that do not point to a lower floor (an unknown package counts as the top)."""
    top = len(FLOORS)
    return [f"{where}: {src} (floor {FLOOR.get(src, top)}) imports {dst} (floor {FLOOR.get(dst, top)})"
            for src, dst, where in edges if FLOOR.get(dst, top) >= FLOOR.get(src, top)]


def test_every_import_points_down() -> None:
    edges = imports()
    assert len(edges) > 100  # the reader sees the imports (an empty list would prove nothing)
    assert upward(edges) == []


def test_an_import_back_up_or_sideways_is_caught() -> None:
    assert upward([("supervisor", "config", "a.py:1"), ("commands", "supervisor", "b.py:2")]) == []
    assert upward([("config", "supervisor", "c.py:3")]) == ["c.py:3: config (floor 0) imports supervisor (floor 8)"]
    assert upward([("capture", "mqtt", "d.py:4")]) == ["d.py:4: capture (floor 2) imports mqtt (floor 2)"]
    assert upward([("ota", "newpackage", "e.py:5")]) != []
