"""Free space where the appliance writes (its state dir: engines, the spool, OTA versions), and the check a step
that needs a known amount makes first, so a full disk is named as such rather than as the error it causes."""

from __future__ import annotations

import os
from pathlib import Path

from appliance.errors import ApplianceError

MB = 1024 * 1024


class NotEnoughSpace(ApplianceError, OSError):
    """A step needs more space than the filesystem has free; the message names the folder and both sizes."""


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (its nearest existing folder's)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize


def require_space(path: Path, need_bytes: int, what: str) -> None:
    """Raise NotEnoughSpace unless ``path`` has ``need_bytes`` free; ``what`` says who needs it."""
    free = free_bytes(path)
    if free < need_bytes:
        raise NotEnoughSpace(f"not enough space in {path}: {what} needs about {_mb(need_bytes)} MB, "
                             f"{_mb(free)} MB free")


def low_space(path: Path, min_free_bytes: int) -> str | None:
    """The reason when ``path`` has less than ``min_free_bytes`` free, else None."""
    free = free_bytes(path)
    if free >= min_free_bytes:
        return None
    return f"disk low: {_mb(free)} MB free in {path} (below {_mb(min_free_bytes)} MB)"


def _mb(size: int) -> str:
    return f"{size / MB:.0f}" if size >= 10 * MB else f"{size / MB:.1f}"
