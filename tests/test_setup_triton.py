"""scripts/setup.sh's Triton step (scripts/setup-triton.sh): a Triton that is already there (APPLIANCE_TRITON_HOME,
or /opt/tritonserver on a Jetson or in the igpu image) is used and .triton is not provisioned; only a host with
neither gets the CPU build. Run for real on fake trees: a checkout whose ``.venv/bin/python`` records that it was
asked to provision (the real provisioning downloads Triton's wheel), and Triton homes with or without the library."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "setup-triton.sh", root / "scripts" / "setup-triton.sh")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/../../provisioned"\n')
    python.chmod(0o755)
    return root


def _triton_tree(home: Path) -> Path:
    (home / "lib").mkdir(parents=True)
    (home / "lib" / "libtritonserver.so").write_bytes(b"\x7fELF")
    (home / "backends" / "python").mkdir(parents=True)
    return home


def _setup_triton(checkout: Path, system_home: Path,
                  triton_home: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "APPLIANCE_TRITON_HOME"}
    if triton_home is not None:
        env["APPLIANCE_TRITON_HOME"] = triton_home
    return subprocess.run(["bash", str(checkout / "scripts" / "setup-triton.sh"), str(system_home)],
                          capture_output=True, text=True, timeout=30, env=env)


def test_the_system_triton_is_used_and_nothing_is_provisioned(checkout: Path, tmp_path: Path) -> None:
    system = _triton_tree(tmp_path / "opt" / "tritonserver")
    result = _setup_triton(checkout, system)
    assert result.returncode == 0, result.stderr
    assert f"Triton from {system} (not provisioning .triton)" in result.stdout
    assert not (checkout / "provisioned").exists() and not (checkout / ".triton").exists()


def test_appliance_triton_home_wins_over_the_system_triton(checkout: Path, tmp_path: Path) -> None:
    system = _triton_tree(tmp_path / "opt" / "tritonserver")
    own = _triton_tree(tmp_path / "elsewhere" / "triton")
    result = _setup_triton(checkout, system, str(own))
    assert result.returncode == 0, result.stderr
    assert f"APPLIANCE_TRITON_HOME={own} (not provisioning .triton)" in result.stdout
    assert not (checkout / "provisioned").exists()


def test_an_appliance_triton_home_without_the_library_is_an_error_not_a_fallback(checkout: Path,
                                                                                 tmp_path: Path) -> None:
    (tmp_path / "typo").mkdir()
    result = _setup_triton(checkout, tmp_path / "no-system", str(tmp_path / "typo"))
    assert result.returncode == 1
    assert f"APPLIANCE_TRITON_HOME={tmp_path / 'typo'} has no lib/libtritonserver.so" in result.stderr
    assert not (checkout / "provisioned").exists()


def test_a_system_home_without_the_library_is_not_used(checkout: Path, tmp_path: Path) -> None:
    partial = tmp_path / "opt" / "tritonserver"
    (partial / "backends" / "python").mkdir(parents=True)  # a half-extracted tarball
    result = _setup_triton(checkout, partial)
    assert result.returncode == 0, result.stderr
    assert (checkout / "provisioned").read_text() == "scripts/provision_triton.py --dest .triton\n"


def test_with_no_triton_the_cpu_build_is_provisioned_into_dot_triton(checkout: Path, tmp_path: Path) -> None:
    result = _setup_triton(checkout, tmp_path / "no-system")
    assert result.returncode == 0, result.stderr
    assert (checkout / "provisioned").read_text() == "scripts/provision_triton.py --dest .triton\n"


def test_setup_sh_takes_its_triton_from_this_step() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "\nscripts/setup-triton.sh\n" in setup
    assert "provision_triton.py" not in setup  # provisioning happens only behind the step's decision
