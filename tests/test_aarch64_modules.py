"""The arm64 smoke set is the modules tests/aarch64-modules.txt lists: scripts/aarch64-smoke.sh collects only
those (collecting the whole suite under emulation imports every test module to deselect it), so no test outside
them may carry the aarch64 marker, and each listed module must exist and hold marked tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LISTED = [line for line in (REPO / "tests" / "aarch64-modules.txt").read_text().splitlines()
          if line.strip() and not line.startswith("#")]


def _selected(*paths: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "aarch64",
                           "-p", "no:cacheprovider", *paths], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_listed_modules_exist() -> None:
    assert LISTED
    assert [m for m in LISTED if not (REPO / "tests" / m).is_file()] == []


def test_the_listed_modules_hold_every_aarch64_test_of_the_suite() -> None:
    whole_suite = _selected()
    listed_only = _selected(*(f"tests/{m}" for m in LISTED))
    assert sorted({node.split("::")[0] for node in whole_suite}) == sorted(f"tests/{m}" for m in LISTED)
    assert sorted(listed_only) == sorted(whole_suite)
