"""A camera's kept footage on disk: closed segments named by the wall-clock times they cover, retention, and
the recorder's status file.

``<state>/recordings/<camera>/<start_ms>-<end_ms>.mp4``: each segment starts at a keyframe; its timestamps start
at 0 at ``start_ms`` (Unix time in milliseconds), so a packet's wall time is ``start + pts * time_base``. A segment
being written is a hidden ``.<start_ms>.part.mp4`` (no index yet); one left by a crash is removed at start.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from appliance.capture.recordconfig import RetainConfig

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d+)-(\d+)\.mp4$")
STATUS_FILE = "status.json"
GB = 1_000_000_000


@dataclass(frozen=True)
class Segment:
    path: Path
    start: float  # wall-clock seconds (Unix time) at timestamp 0
    end: float    # wall-clock seconds just after its last frame
    size: int


def recordings_dir(state_dir: Path, camera_id: str) -> Path:
    return state_dir / "recordings" / camera_id


def segment_name(start: float, end: float) -> str:
    return f"{round(start * 1000)}-{round(end * 1000)}.mp4"


def list_segments(folder: Path) -> list[Segment]:
    """The closed segments in ``folder``, oldest first (none when it does not exist)."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None:
            continue
        try:
            size = entry.stat().st_size
        except FileNotFoundError:  # removed by retention meanwhile
            continue
        found.append(Segment(Path(entry.path), int(match[1]) / 1000, int(match[2]) / 1000, size))
    return sorted(found, key=lambda s: s.start)


def kept_bytes(folder: Path) -> int:
    return sum(s.size for s in list_segments(folder))


def remove_partial(folder: Path) -> None:
    """Segments a killed recorder left half-written (no index: unreadable)."""
    for leftover in folder.glob(".*.part.mp4"):
        leftover.unlink(missing_ok=True)


class KeptSegments:
    """The segments of one folder, oldest first, read once and then kept up to date by the recorder (so that
    retention does not list a folder of tens of thousands of files after every segment)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._segments = deque(list_segments(folder))
        self.total = sum(s.size for s in self._segments)

    def add(self, segment: Segment) -> None:
        self._segments.append(segment)
        self.total += segment.size

    @property
    def last_end(self) -> float:
        return self._segments[-1].end if self._segments else 0.0

    def trim(self, retain: RetainConfig, now: float | None = None) -> list[Segment]:
        """Remove segments older than ``retain.days``, then the oldest until the rest fit ``retain.max_gb``."""
        now = time.time() if now is None else now
        removed = []
        while self._segments:
            segment = self._segments[0]
            if segment.end >= now - retain.days * 86400 and self.total <= retain.max_gb * GB:
                break
            self._segments.popleft()
            segment.path.unlink(missing_ok=True)
            self.total -= segment.size
            removed.append(segment)
        if removed:
            log.info("recordings: removed %d oldest segment(s) of %s (retain: %g days, %g GB)", len(removed),
                     self.folder.name, retain.days, retain.max_gb)
        return removed


def enforce_retention(folder: Path, retain: RetainConfig, now: float | None = None) -> list[Segment]:
    """:meth:`KeptSegments.trim` on what ``folder`` holds now."""
    return KeptSegments(folder).trim(retain, now)


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


@dataclass(frozen=True)
class RecorderStatus:
    recording: bool
    reason: str      # why not recording ("" while it records)
    since: float     # when it started or stopped recording
    last_end: float  # the newest closed segment's end: a clip ending before it can be written
    kept_bytes: int  # the camera's footage on disk


def write_status(folder: Path, status: RecorderStatus) -> None:
    tmp = folder / f".{STATUS_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(status)))
    tmp.replace(folder / STATUS_FILE)


def read_status(folder: Path) -> RecorderStatus | None:
    try:
        return RecorderStatus(**json.loads((folder / STATUS_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
