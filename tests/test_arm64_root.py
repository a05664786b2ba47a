"""scripts/arm64-root.sh reuses the aarch64 check's root only while it was built from the current scripts and
constraints (its key). Run on a copy of the checkout's key files and a fake root (a marker file): no debootstrap."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KEYED = ["scripts/arm64-root.sh", "Dockerfile.igpu", "scripts/setup.sh", "scripts/setup.d/20-detector.sh",
         "scripts/setup-triton.sh", "scripts/provision_triton.py", "pyproject.toml",
         "constraints/linux-aarch64.txt"]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The files the key covers, plus one it does not (README.md)."""
    root = tmp_path / "checkout"
    for rel in [*KEYED, *(p.relative_to(REPO).as_posix() for p in (REPO / "scripts/setup.d").glob("*.sh")),
                "README.md"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    return root


def _state(checkout: Path, root: Path) -> tuple[str, str]:
    proc = subprocess.run(["bash", str(checkout / "scripts/arm64-root.sh"), "state"], capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin", "APPLIANCE_ARM64_ROOT": str(root)})
    assert proc.returncode == 0, proc.stderr
    state, key = proc.stdout.split()
    return state, key


def _built(root: Path, key: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / ".appliance-root").write_text(f"built 2026-01-01T00:00:00Z from bookworm\nkey {key}\n")


def test_no_root_is_missing(checkout: Path, tmp_path: Path) -> None:
    assert _state(checkout, tmp_path / "root")[0] == "missing"


def test_a_root_built_from_these_files_is_reused(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    _, key = _state(checkout, root)
    _built(root, key)
    assert _state(checkout, root) == ("current", key)
    (checkout / "README.md").write_text("not part of the root\n")
    assert _state(checkout, root) == ("current", key)


def test_a_root_from_before_keys_is_stale(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / ".appliance-root").write_text("built 2026-01-01T00:00:00Z from bookworm\n")
    assert _state(checkout, root)[0] == "stale"


@pytest.mark.parametrize("changed", KEYED)
def test_a_change_to_what_builds_the_root_makes_it_stale(checkout: Path, tmp_path: Path, changed: str) -> None:
    root = tmp_path / "root"
    _, key = _state(checkout, root)
    _built(root, key)
    with open(checkout / changed, "a") as f:
        f.write("\n# changed\n")
    state, new_key = _state(checkout, root)
    assert (state, new_key != key) == ("stale", True)
