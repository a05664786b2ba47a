"""A private directory in the real /dev/shm for tests whose cameras create frame rings there."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterator


def private_shm_dir(prefix: str = "appliance-test", check_leaks: bool = True) -> Iterator[Path]:
    """Fixture body: yields a fresh directory and removes it afterwards. With ``check_leaks`` the test fails if
    anything was left in it (a ring its owner should have removed)."""
    root = Path("/dev/shm") / f"{prefix}-{uuid.uuid4().hex[:12]}"
    root.mkdir()
    yield root
    leftovers = sorted(p.name for p in root.iterdir())
    shutil.rmtree(root, ignore_errors=True)
    assert not (check_leaks and leftovers), f"test leaked shared-memory files: {leftovers}"
