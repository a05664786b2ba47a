"""scripts/provision_triton.py --fetch-only MACHINE puts that machine's checked wheel in the cache and lays out
nothing: the aarch64 check fetches the arm64 wheel on the host so the emulated root's own provisioning finds it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "provision_triton.py"
HOST_CACHE = Path.home() / ".cache" / "appliance" / "wheels"  # where scripts/setup.sh's provisioning keeps it


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_fetch_only_finds_a_cached_wheel_by_its_checksum_and_lays_out_nothing(tmp_path: Path) -> None:
    wheel = next(HOST_CACHE.glob("nvidia_pytriton-*_x86_64.whl"), None)
    if wheel is None:
        pytest.fail(f"no x86_64 pytriton wheel in {HOST_CACHE}: run scripts/setup.sh")
    cache = tmp_path / "cache"
    cache.mkdir()
    try:
        os.link(wheel, cache / wheel.name)
    except OSError:
        shutil.copy2(wheel, cache / wheel.name)
    proc = _run(tmp_path, "--fetch-only", "x86_64", "--cache", str(cache))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(cache / wheel.name)
    assert "downloading" not in proc.stdout  # the cached copy passed its checksum
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # no .triton


def test_fetch_only_refuses_a_machine_without_a_wheel(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--fetch-only", "riscv64", "--cache", str(tmp_path / "cache"))
    assert proc.returncode == 2 and "invalid choice: 'riscv64'" in proc.stderr
    assert not (tmp_path / "cache").exists()
