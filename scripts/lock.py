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
Needs Python 3.11+ (tomllib); standard library only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ("x86_64", "aarch64")
PYTHONS = ("3.10", "3.11", "3.12")  # the first is resolved; the others must accept the same pins
MANYLINUX = ("manylinux_2_35", "manylinux_2_28", "manylinux_2_17", "manylinux2014")  # glibc 2.35: Ubuntu 22.04
HEADER = ("# Pinned versions for Linux {machine}, Python {pythons}: written by scripts/lock.py from pyproject.toml;\n"
          "# do not edit by hand (docs/jetson.md, \"Reproducible installs\", says how to refresh).\n")


def requirements(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    return [*project["dependencies"], *project.get("optional-dependencies", {}).get("test", [])]


def resolve(reqs: list[str], machine: str, python: str, constraints: Path | None = None) -> dict[str, str]:
    """{name: version} that pip would install for ``machine`` and ``python``, wheels only."""
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
        installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}


def render(pins: dict[str, str], machine: str) -> str:
    body = "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))
    return HEADER.format(machine=machine, pythons=f"{PYTHONS[0]}-{PYTHONS[-1]}") + body


def lock(machine: str, reqs: list[str]) -> str:
    pins = resolve(reqs, machine, PYTHONS[0])
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as first:
        first.write(render(pins, machine))
        first.flush()
        for python in PYTHONS[1:]:
            # A newer Python may need a package the oldest did not (a backport's absence is fine); add it.
            for name, version in resolve(reqs, machine, python, Path(first.name)).items():
                if pins.setdefault(name, version) != version:
                    raise SystemExit(f"error: {name} resolves to {version} on Python {python}, {pins[name]} on "
                                     f"{PYTHONS[0]}, for {machine}")
    return render(pins, machine)


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
