#!/usr/bin/env python3
"""Write the pinned constraints for each architecture: ``constraints/linux-<machine>.txt``.

setup.sh, install-service.sh and Dockerfile.igpu install with ``pip -c`` on the file for the running machine,
so devices installed months apart get the same numpy, onnxruntime and OpenCV. The pins are resolved from
pyproject.toml's dependencies and ``test`` extra, from wheels only, for the oldest Python the appliance supports
(3.10: the igpu image's), then checked to resolve unchanged for every newer supported Python, so one file serves
Python 3.10-3.12 on that architecture. Nothing is installed: pip resolves with ``--dry-run --report``.

    .venv/bin/python scripts/lock.py    # refresh both files (needs the package index; a minute or two)

Refresh after changing a dependency in pyproject.toml, or to take newer releases, and commit the files; a test
(tests/test_constraints.py) fails when a dependency has no pin that satisfies pyproject.toml.
Markers are evaluated here for each target Python and machine (pip evaluates them for the Python running it), so
a backport only Python 3.10 installs (tomli, exceptiongroup, async-timeout) is pinned with its marker:
``tomli==2.3.0 ; python_version < "3.11"``. Needs Python 3.11+ (tomllib) and ``packaging`` (in the venv).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ("x86_64", "aarch64")
PYTHONS = ("3.10", "3.11", "3.12")  # the first is resolved; the others must accept the same pins
MANYLINUX = ("manylinux_2_35", "manylinux_2_28", "manylinux_2_17", "manylinux2014")  # glibc 2.35: Ubuntu 22.04
HEADER = ("# Pinned versions for Linux {machine}, Python {pythons}: written by scripts/lock.py from pyproject.toml;\n"
          "# do not edit by hand (docs/jetson.md, \"Reproducible installs\", says how to refresh).\n")


def requirements(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    return [*project["dependencies"], *project.get("optional-dependencies", {}).get("test", [])]


def environment(machine: str, python: str) -> dict[str, str]:
    """The PEP 508 marker environment of a Linux ``machine`` running CPython ``python``. pip's
    ``--python-version`` and ``--platform`` pick wheels but evaluate markers for the Python running pip, so a
    backport gated on ``python_version < "3.11"`` (tomli, exceptiongroup, async-timeout) is missed by its report."""
    return {**default_environment(), "python_version": python, "python_full_version": f"{python}.0",
            "platform_machine": machine, "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def resolve(reqs: list[str], machine: str, python: str, constraints: Path | None = None) -> list[dict]:
    """The ``install`` items (metadata included) of pip's report for ``machine`` and ``python``, wheels only."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--only-binary=:all:", f"--python-version={python}", f"--report={report}"]
        cmd += [f"--platform={tag}_{machine}" for tag in MANYLINUX]
        if constraints is not None:
            cmd += ["-c", str(constraints)]
        result = subprocess.run([*cmd, *reqs], capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"error: pip could not resolve for {machine}, Python {python}:\n{result.stderr[-2000:]}")
        installs: list[dict] = json.loads(report.read_text())["install"]
    return installs


def versions(installs: list[dict]) -> dict[str, str]:
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in installs}


def unmet(installs: list[dict], reqs: list[str], env: dict[str, str], pinned: set[str]) -> list[str]:
    """Requirements (markers dropped) that apply in ``env`` to the roots or an installed package but name no
    pinned package: what pip's report left out because it evaluated markers for its own Python."""
    wanted: dict[str, str] = {}

    def consider(text: str, extras: list[str]) -> None:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name in pinned or name in wanted:
            return
        if req.marker is None or any(req.marker.evaluate({**env, "extra": extra}) for extra in extras):
            req.marker = None
            wanted[name] = str(req)

    for text in reqs:
        consider(text, [""])
    for item in installs:
        for text in item["metadata"].get("requires_dist", []):
            consider(text, ["", *item.get("requested_extras", [])])
    return list(wanted.values())


def marker(pythons: set[str]) -> str:
    """The environment marker for a pin needed on some of PYTHONS only ("" when needed on all)."""
    if set(PYTHONS) <= pythons:
        return ""
    needed = [p for p in PYTHONS if p in pythons]
    if needed == list(PYTHONS[:len(needed)]):
        return f'python_version < "{PYTHONS[len(needed)]}"'
    if needed == list(PYTHONS[-len(needed):]):
        return f'python_version >= "{needed[0]}"'
    return " or ".join(f'python_version == "{p}"' for p in needed)


def render(pins: dict[str, str], machine: str, only: dict[str, set[str]] | None = None) -> str:
    """The constraints file; ``only`` gates a pin with a marker for the Pythons that need it."""
    lines = []
    for name, version in sorted(pins.items()):
        gate = marker((only or {}).get(name, set(PYTHONS)))
        lines.append(f"{name}=={version}" + (f" ; {gate}" if gate else ""))
    header = HEADER.format(machine=machine, pythons=f"{PYTHONS[0]}-{PYTHONS[-1]}")
    return header + "".join(f"{line}\n" for line in lines)


def lock(machine: str, reqs: list[str]) -> str:
    installs = resolve(reqs, machine, PYTHONS[0])
    pins = versions(installs)
    everywhere = set(pins)  # what pip found (markers as its own Python sees them): pinned for every Python
    only: dict[str, set[str]] = {}  # name -> the Pythons that need it, for a pin found by marker evaluation
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "pins.txt"  # markerless: constraints for the resolves below

        def add(found: dict[str, str], python: str, gated: bool) -> None:
            for name, version in found.items():
                if pins.setdefault(name, version) != version:
                    raise SystemExit(f"error: {name} resolves to {version} on Python {python}, {pins[name]} "
                                     f"elsewhere, for {machine}")
                if gated and name not in everywhere:
                    only.setdefault(name, set()).add(python)
                elif not gated:
                    everywhere.add(name)
            plain.write_text(render(pins, machine))

        plain.write_text(render(pins, machine))
        for python in PYTHONS:
            if python != PYTHONS[0]:
                # A newer Python may need a package the oldest did not (a backport's absence is fine); add it.
                installs = resolve(reqs, machine, python, plain)
                add(versions(installs), python, gated=False)
            env = environment(machine, python)
            for _ in range(5):  # a backport may have dependencies of its own
                pinned_here = {name for name in pins if name not in only or python in only[name]}
                missing = unmet(installs, reqs, env, pinned_here)
                if not missing:
                    break
                extra = resolve(missing, machine, python, plain)
                installs = [*installs, *extra]
                add(versions(extra), python, gated=True)
            else:
                raise SystemExit(f"error: the backports for Python {python} on {machine} did not settle")
    return render(pins, machine, only)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    reqs = requirements(ROOT / "pyproject.toml")
    for machine in MACHINES:
        path = ROOT / "constraints" / f"linux-{machine}.txt"
        text = lock(machine, reqs)
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)} ({len(text.splitlines()) - 2} pins)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
