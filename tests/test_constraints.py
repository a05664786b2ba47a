"""The per-architecture constraints (written by scripts/lock.py) pin every dependency pyproject.toml names, within
its range, so an install on any machine gets the versions CI tested. A dependency added without refreshing the
files, or a range moved past a pin, fails here."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (the igpu image): pytest brings tomli there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
MACHINES = ("x86_64", "aarch64")


def _pinned(path: Path) -> dict[str, tuple[str, Marker | None]]:
    """{name: (version, marker or None)} from ``name==version`` or ``name==version ; marker`` lines."""
    pins = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            req = Requirement(line)
            specs = list(req.specifier)
            assert len(specs) == 1 and specs[0].operator == "==", f"{path.name}: {line!r} is not an exact pin"
            pins[canonicalize_name(req.name)] = (specs[0].version, req.marker)
    return pins


def _pins(path: Path) -> dict[str, str]:
    return {name: version for name, (version, _) in _pinned(path).items()}


def _environment(machine: str, python: str) -> dict[str, str]:
    """PEP 508 markers' view of CPython ``python`` on Linux ``machine`` (written here, not taken from lock.py)."""
    return {**default_environment(), "python_version": python, "python_full_version": f"{python}.12",
            "platform_machine": machine, "sys_platform": "linux", "platform_system": "Linux", "extra": ""}


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]


@pytest.mark.parametrize("machine", MACHINES)
def test_every_dependency_is_pinned_within_its_range(machine: str) -> None:
    pins = _pins(REPO / "constraints" / f"linux-{machine}.txt")
    requirements = _requirements()
    assert len(requirements) >= 10 and len(pins) >= len(requirements)
    for req in requirements:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} has no pin in linux-{machine}.txt: run scripts/lock.py"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{req.name}=={pins[name]} is outside {req} in linux-{machine}.txt: run scripts/lock.py"


def test_a_pin_outside_its_range_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "linux-x86_64.txt"
    bad.write_text((REPO / "constraints/linux-x86_64.txt").read_text().replace("paho-mqtt==2.", "paho-mqtt==1."))
    pins = _pins(bad)
    (paho,) = [r for r in _requirements() if r.name == "paho-mqtt"]
    assert not paho.specifier.contains(pins["paho-mqtt"])


def test_setup_install_and_dockerfile_install_with_the_constraints() -> None:
    for script in ("scripts/setup.sh", "scripts/install-service.sh", "Dockerfile.igpu"):
        text = (REPO / script).read_text()
        assert "constraints/linux-$(uname -m).txt" in text and "-c " in text, script


# What a Python 3.10 install (the igpu image, JetPack 6's Ubuntu 22.04) takes that 3.11 does not, from the
# packages' own metadata: pytest and mypy need tomli, pytest exceptiongroup, aiohttp (tritonclient[http]) async-timeout.
BACKPORTS_3_10 = ("tomli", "exceptiongroup", "async-timeout")


@pytest.mark.parametrize("machine", MACHINES)
def test_the_backports_python_3_10_needs_are_pinned_for_it_only(machine: str) -> None:
    pins = _pinned(REPO / "constraints" / f"linux-{machine}.txt")
    for name in BACKPORTS_3_10:
        assert name in pins, f"{name} (Python 3.10 only) has no pin in linux-{machine}.txt: run scripts/lock.py"
        _, marker = pins[name]
        assert marker is not None and marker.evaluate(_environment(machine, "3.10")), (name, str(marker))
        assert not marker.evaluate(_environment(machine, "3.11")), f"{name}: {marker} also applies on 3.11"


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12"])
def test_every_dependency_of_a_pinned_package_is_pinned_for_each_python(machine: str, python: str) -> None:
    """Each pinned package installed in this venv: every requirement its metadata declares for that Python
    and machine names a package pinned for it (read with importlib.metadata, independently of pip's report)."""
    env = _environment(machine, python)
    pins = _pinned(REPO / "constraints" / f"linux-{machine}.txt")
    applies = {name for name, (_, marker) in pins.items() if marker is None or marker.evaluate(env)}
    checked = 0
    for name in sorted(applies):
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed on this host (a backport of another Python)
        checked += 1
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                assert canonicalize_name(req.name) in applies, \
                    f"{name} needs {text!r} on Python {python}/{machine}, not pinned there: run scripts/lock.py"
    assert checked >= len(applies) * 0.8, f"only {checked} of {len(applies)} pinned packages are installed here"
