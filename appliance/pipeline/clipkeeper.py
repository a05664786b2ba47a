"""Event clips on the supervisor's side: each event of a recording camera gets a planned clip; once the capture
process closed the segment that reaches the clip's end, the clip is checked by writing it once, and a ``clip``
message says so (or why it failed). The page and ``appliance clips export`` write a clip again on request:
clips are views over the kept segments (capture/recording/clips.py), nothing per event is kept but a small
index entry ``<state>/clips/<camera>/<event_id>.json``.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from appliance.capture.recordconfig import RecordConfig
from appliance.capture.recording.clips import ClipError, clip_complete, write_clip
from appliance.capture.recording.segments import read_status
from appliance.events import ClipPlan
from appliance.mqtt.messages import ClipMessage
from appliance.pipeline.sink import Sink

log = logging.getLogger(__name__)

POLL_S = 0.5
INDEX_KEEP = 2000      # index entries per camera; the footage itself goes by retention
REPORT_EVERY = 4       # polls between metric reports
CACHE_KEEP = 8         # clips written for the page, newest kept


@dataclass
class ClipEntry:
    event_id: str
    camera_id: str
    event_time: float
    start: float
    end: float
    status: str = "pending"  # pending, complete, failed
    frames: int = 0
    reason: str = ""
    written_end: float = 0.0  # complete: just after the clip's last frame (at or after ``end``)


def clips_dir(state_dir: Path) -> Path:
    return state_dir / "clips"


def read_index(state_dir: Path) -> list[ClipEntry]:
    """Every camera's clip index entries, oldest event first (for ``appliance clips list``)."""
    entries = []
    for path in clips_dir(state_dir).glob("*/*.json"):
        try:
            entries.append(ClipEntry(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            log.warning("clips: ignoring unreadable index entry %s", path)
    return sorted(entries, key=lambda e: e.event_time)


def find_entry(state_dir: Path, event_id: str) -> ClipEntry | None:
    for path in clips_dir(state_dir).glob(f"*/{event_id}.json"):
        try:
            return ClipEntry(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
    return None


class ClipMetrics(Protocol):
    """appliance.health.metrics.ApplianceMetrics."""

    def record_clips(self, camera_id: str, *, kept_bytes: int, recording: bool, written: int,
                     failed: Mapping[str, int]) -> None: ...


class ClipKeeper(Sink):
    """Plans, checks and announces clips; one thread. ``publish(ClipMessage)`` spools the clip message. A sink
    for its stop: the analytics stage asks it for each event's clip plan as the event is made."""

    def __init__(self, state_dir: Path, cameras: Mapping[str, RecordConfig], publish: Callable[[ClipMessage], Any],
                 wall: Callable[[], float] = time.time, metrics: ClipMetrics | None = None) -> None:
        """``metrics``: the footage and clip counts go there every few seconds (``report``)."""
        self.state_dir, self._publish, self._wall = state_dir, publish, wall
        self._metrics = metrics
        self._lock = threading.Lock()
        self._pending: dict[str, ClipEntry] = {}
        self._cache: OrderedDict[str, Path] = OrderedDict()
        self.cameras: dict[str, RecordConfig] = {}  # the cameras recording now: their events get clips
        self._known: dict[str, RecordConfig] = {}  # and those that did since start: their clips are still served
        self.written: dict[str, int] = {}
        self.failed: dict[tuple[str, str], int] = {}  # (camera, reason kind) -> count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clips", daemon=True)
        self.apply(cameras)
        for entry in read_index(state_dir):  # planned before a restart: checked as if it never stopped
            if entry.status == "pending" and entry.camera_id in self._known:
                self._pending[entry.event_id] = entry
        self._thread.start()

    def apply(self, cameras: Mapping[str, RecordConfig]) -> None:
        """The recording cameras and their settings from now on (a reload): a camera that starts recording gets
        clips for its next events, new pre/post seconds count from the next event. Clips already planned keep
        their bounds; those of a camera that stopped recording are still checked and served."""
        for camera in cameras:
            (clips_dir(self.state_dir) / camera).mkdir(parents=True, exist_ok=True)
        with self._lock:
            self.cameras = dict(cameras)
            self._known.update(cameras)
            for camera in cameras:
                self.written.setdefault(camera, 0)

    def recordings(self, camera_id: str) -> Path:
        return self.state_dir / "recordings" / camera_id

    def plan(self, event_id: str, camera_id: str, event_time: float) -> ClipPlan | None:
        """The clip of an event (None when its camera does not record), registered to be checked."""
        config = self.cameras.get(camera_id)
        if config is None:
            return None
        entry = ClipEntry(event_id, camera_id, event_time, event_time - config.pre_capture_s,
                          event_time + config.post_capture_s)
        self._save(entry)
        with self._lock:
            self._pending[event_id] = entry
        return ClipPlan(f"/events/{event_id}.mp4", entry.start, entry.end)

    def _save(self, entry: ClipEntry) -> None:
        folder = clips_dir(self.state_dir) / entry.camera_id
        tmp = folder / f".{entry.event_id}.json.tmp"
        tmp.write_text(json.dumps(asdict(entry)))
        tmp.replace(folder / f"{entry.event_id}.json")

    def _run(self) -> None:
        polls = 0
        while not self._stop.wait(POLL_S):
            polls += 1
            if self._metrics is not None and polls % REPORT_EVERY == 0:
                self.report(self._metrics)
            with self._lock:
                pending = list(self._pending.values())
            for entry in pending:
                try:
                    self._check(entry)
                except Exception:  # noqa: BLE001 - one bad clip must not end the others' checks
                    log.exception("clips: checking the clip of event %s failed", entry.event_id)
                    self._finish(entry, "failed", reason="internal error (see the log)")

    def _check(self, entry: ClipEntry) -> None:
        config, folder = self._known[entry.camera_id], self.recordings(entry.camera_id)
        if not clip_complete(folder, entry.end):
            if self._wall() > entry.end + 2 * config.segment_s + 30:
                self._finish(entry, "failed", reason=f"no footage after {entry.end:.3f} was written (recording "
                             "stopped or paused)")
            return
        with tempfile.TemporaryDirectory(dir=self.state_dir) as tmp:
            try:
                clip = write_clip(folder, entry.start, entry.end, Path(tmp) / "check.mp4")
            except ClipError as exc:
                self._finish(entry, "failed", reason=str(exc))
                return
        entry.start, entry.written_end = clip.start, clip.end
        self._finish(entry, "complete", frames=clip.frames)

    def _finish(self, entry: ClipEntry, status: str, *, frames: int = 0, reason: str = "") -> None:
        entry.status, entry.frames, entry.reason = status, frames, reason
        self._save(entry)
        with self._lock:
            self._pending.pop(entry.event_id, None)
            if status == "complete":
                self.written[entry.camera_id] = self.written.get(entry.camera_id, 0) + 1
            else:
                kind = "missing" if "footage" in reason else "error"
                self.failed[(entry.camera_id, kind)] = self.failed.get((entry.camera_id, kind), 0) + 1
        if status == "failed":
            log.warning("camera %s: the clip of event %s could not be written: %s", entry.camera_id,
                        entry.event_id, reason)
        self._trim(entry.camera_id)
        message = ClipMessage(entry.event_id, entry.camera_id, f"/events/{entry.event_id}.mp4",
                              "complete" if status == "complete" else "failed", entry.start,
                              entry.written_end if status == "complete" else entry.end, frames, reason)
        try:
            self._publish(message)
        except Exception as exc:  # noqa: BLE001 - stopping: the index entry says it; the message is lost
            log.warning("camera %s: the clip message of event %s was not sent: %s", entry.camera_id,
                        entry.event_id, exc)

    def _trim(self, camera_id: str) -> None:
        entries = sorted(clips_dir(self.state_dir).joinpath(camera_id).glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in entries[:-INDEX_KEEP]:
            old.unlink(missing_ok=True)

    def report(self, metrics: ClipMetrics) -> None:
        """Footage kept, recording on or paused, clips written and failed: for ``/metrics``."""
        for camera in list(self.cameras):
            status = read_status(self.recordings(camera))
            with self._lock:
                failed = {kind: n for (cam, kind), n in self.failed.items() if cam == camera}
                written = self.written.get(camera, 0)
            metrics.record_clips(camera, kept_bytes=status.kept_bytes if status else 0,
                                 recording=bool(status and status.recording), written=written, failed=failed)

    def clip_file(self, event_id: str) -> Path | None:
        """The event's clip as an MP4 file (written now from the segments, or from the small cache); None when
        there is no such event or its footage is gone."""
        entry = find_entry(self.state_dir, event_id)
        if entry is None or entry.status != "complete" or entry.camera_id not in self._known:
            return None
        with self._lock:
            cached = self._cache.get(event_id)
        if cached is not None and cached.exists():
            return cached
        dest = clips_dir(self.state_dir) / ".cache" / f"{event_id}.mp4"
        try:
            write_clip(self.recordings(entry.camera_id), entry.start, entry.end, dest)
        except ClipError as exc:
            log.info("clips: event %s: %s", event_id, exc)
            return None
        with self._lock:
            self._cache[event_id] = dest
            while len(self._cache) > CACHE_KEEP:
                _, old = self._cache.popitem(last=False)
                old.unlink(missing_ok=True)
        return dest

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
