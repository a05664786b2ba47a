"""The packages of ``appliance`` stand in floors, and every import points down (CONTRIBUTING.md, "Layout"): a package
imports only packages on lower floors. A new package must be given its floor here; an import that runs back up fails.
Read from the source with ``ast`` (every import, including those inside functions and under TYPE_CHECKING; a relative
import is resolved against its file's package)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "appliance"

# Lowest first. Within a floor, packages do not import each other.
FLOORS: list[set[str]] = [
    {"errors"},                                                                  # the base of our errors
    {"config", "helptext", "logs", "procs", "sdnotify", "durable", "paths", "exitcodes", "detections", "__init__",
     "detector", "passwords", "diskspace", "framing", "events"},                                         # the toolkit
    {"backoff", "analytics", "triton", "detector.profile", "detector.buildprofile", "detector.source"},  # libraries
    {"detector.prepost", "capture", "mqtt", "webserver"},                        # frames in, messages out, http
    {"health", "detector.repository", "detector.calibration", "sparkplug", "web",  # web: the operator's page
     "opcua"},                                                                   # opcua: the PLC's face
    {"detector.engines", "restream"},                                            # restream: RTSP out
    {"detector.serving"},                                                        # which model serves a frame
    {"ota"},                                                                     # the device's side of updates
    {"appconfig", "fleet"},                                                      # the config file; the operator's side
    {"pipeline"},                                                                # the frame path: stages and sinks
    {"supervisor"},
    {"harness"},                                                                 # stand-ins around a device
    {"bench"},                                                                   # its broker is harness's
    {"commands"},                                                                # the CLI
    {"__main__"},
]
FLOOR = {package: n for n, floor in enumerate(FLOORS) for package in floor}


def _package(path: Path) -> str:
    """A top-level package (``mqtt``), or for the detector's subpackages ``detector.<sub>``: each has its floor."""
    parts = path.relative_to(PACKAGE).parts
    if parts[0] == "detector" and len(parts) > 1:
        return "detector." + parts[1].removesuffix(".py") if parts[1] != "__init__.py" else "detector"
    return parts[0].removesuffix(".py")


def imported_modules(path: Path, node: ast.stmt) -> list[str]:
    """The absolute module names an import statement in ``path`` (a file under appliance/) reads; a relative
    import is resolved against the file's package, so ``from ..mqtt import x`` counts like ``appliance.mqtt``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        base = node.module or ""
    else:
        package = ["appliance", *path.relative_to(PACKAGE).parent.parts]  # __init__.py's package is its folder
        if node.level > len(package):
            raise ValueError(f"{path}:{node.lineno}: relative import climbs above appliance")
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    if base in ("appliance", "appliance.detector") or node.module is None:  # `from appliance import x`: x is a module
        return [f"{base}.{alias.name}" for alias in node.names]
    return [base]


def imports() -> list[tuple[str, str, str]]:
    """(importing package, imported package, where) for every import of another appliance package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _package(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in imported_modules(path, node):
                parts = name.split(".")
                if parts[0] != "appliance" or len(parts) < 2:
                    continue
                target = f"detector.{parts[2]}" if parts[1] == "detector" and len(parts) > 2 else parts[1]
                if target != source:
                    found.append((source, target, f"{path.relative_to(REPO)}:{node.lineno}"))
    return found


def _resolved(file: str, statement: str) -> list[str]:
    node = ast.parse(statement).body[0]
    return imported_modules(PACKAGE / file, node)


def test_relative_imports_are_resolved_against_the_files_package() -> None:
    assert _resolved("supervisor/app.py", "from ..mqtt import publisher") == ["appliance.mqtt"]
    assert _resolved("supervisor/app.py", "from ..mqtt.spool import Spool") == ["appliance.mqtt.spool"]
    assert _resolved("supervisor/app.py", "from .. import mqtt, ota") == ["appliance.mqtt", "appliance.ota"]
    assert _resolved("supervisor/app.py", "from . import cameras") == ["appliance.supervisor.cameras"]
    assert _resolved("supervisor/__init__.py", "from .cameras import Cameras") == ["appliance.supervisor.cameras"]
    assert _resolved("detector/repository/stages/common.py", "from ....config import base") == ["appliance.config"]
    assert _resolved("detector/engines/manager.py", "from .. import prepost") == ["appliance.detector.prepost"]
    assert _resolved("paths.py", "from .config import base") == ["appliance.config"]
    assert _resolved("ota/manager.py", "from appliance.detector import serving") == ["appliance.detector.serving"]
    router = "appliance.detector.serving.router"
    assert _resolved("ota/manager.py", f"import {router}") == [router]
    # And an upward relative import is caught like an absolute one.
    names = _resolved("config/base.py", "from .. import supervisor")
    edges = [("config", name.split(".")[1], "x.py:1") for name in names]
    assert upward(edges) == ["x.py:1: config (floor 1) imports supervisor (floor 10)"]


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
    assert upward([("config", "supervisor", "c.py:3")]) == ["c.py:3: config (floor 1) imports supervisor (floor 10)"]
    assert upward([("capture", "mqtt", "d.py:4")]) == ["d.py:4: capture (floor 3) imports mqtt (floor 3)"]
    assert upward([("ota", "newpackage", "e.py:5")]) != []
    assert upward([("detector.prepost", "detector.engines", "f.py:6")]) != []
