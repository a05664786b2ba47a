"""A small real filesystem for disk-full tests: a tmpfs of a chosen size (the suite runs as root), and a filler
file that leaves only so many bytes free. Where the kernel refuses the mount (no CAP_SYS_ADMIN), the test skips
and says why: nothing else gives a real ENOSPC."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """``path`` (made if missing) with a tmpfs of ``size_bytes`` mounted on it until the block ends."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a real full disk (needs root / CAP_SYS_ADMIN): "
                    f"{mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(folder: Path, leave_bytes: int) -> Path:
    """A file in ``folder`` that takes all its filesystem's free space but ``leave_bytes``; delete it to free."""
    filler = folder / "filler"
    stat = os.statvfs(folder)
    size = max(0, stat.f_bavail * stat.f_frsize - leave_bytes)
    with filler.open("wb") as out:
        chunk = b"\0" * (1024 * 1024)
        while size > 0:
            size -= out.write(chunk[:min(size, len(chunk))])
    return filler
