"""The per-architecture constraints (written by scripts/lock.py) pin every dependency pyproject.toml names, within
its range, so an install on any machine gets the versions CI tested. A dependency added without refreshing the
files, or a range moved past a pin, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (the igpu image): pytest brings tomli there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
MACHINES = ("x86_64", "aarch64")


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


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
