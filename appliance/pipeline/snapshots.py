"""Snapshots: a JPEG of the exact frame that raised analytics events, with that frame's boxes drawn.

The frame path copies a frame's pixels at submit (its ring slot is released before the result says whether it
raised an event); one worker thread behind a bounded queue encodes, and a full queue drops the snapshot rather
than block. Files, sidecars and the index: docs/analytics.md, under "Snapshots".
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from appliance.analytics.config import SnapshotConfig
from appliance.analytics.draw import DrawnBox, Scene, draw_scene
from appliance.mqtt.messages import snapshot_properties

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class SnapshotJob:
    snapshot_id: str
    camera_id: str
    frame_seq: int
    capture_time: float
    pixels: np.ndarray            # HxWx3, a copy of the ring's frame
    pixel_format: str             # "bgr" or "rgb"
    boxes: Sequence[DrawnBox]
    event_ids: Sequence[str]
    event_tracks: frozenset[int]  # drawn in EVENT_BGR


def encode_snapshot(job: SnapshotJob, config: SnapshotConfig) -> bytes:
    """The frame scaled to at most ``max_width``, the boxes drawn, as JPEG bytes."""
    image = job.pixels if job.pixel_format == "bgr" else cv2.cvtColor(job.pixels, cv2.COLOR_RGB2BGR)
    height, width = image.shape[:2]
    scale = min(1.0, config.max_width / width)
    if scale < 1.0:
        image = cv2.resize(image, (round(width * scale), round(height * scale)), interpolation=cv2.INTER_AREA)
    else:
        image = image.copy()
    draw_scene(image, Scene(boxes=job.boxes), scale=scale, highlight=job.event_tracks)
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, config.jpeg_quality])
    if not ok:
        raise RuntimeError("OpenCV could not encode the snapshot")
    return data.tobytes()


class SnapshotStore:
    """The newest ``keep`` snapshots per camera on disk, and which event each one proves. Thread-safe."""

    def __init__(self, root: Path, keep: Mapping[str, int]) -> None:
        self.root = root
        self._keep = dict(keep)
        self._lock = threading.Lock()
        self._by_camera: dict[str, OrderedDict[str, list[str]]] = {c: OrderedDict() for c in keep}
        self._events: dict[str, tuple[str, str]] = {}  # event id -> (camera, snapshot id)
        for camera in keep:
            self._load(camera)

    def add_camera(self, camera: str, keep: int) -> None:
        """Keep ``keep`` snapshots of ``camera`` too (a camera a reload started), from what is on disk."""
        with self._lock:
            self._keep[camera] = keep
            if camera not in self._by_camera:
                self._by_camera[camera] = OrderedDict()
                self._load(camera)

    def _dir(self, camera: str) -> Path:
        return self.root / camera

    def _load(self, camera: str) -> None:
        """Index what an earlier run left, oldest first, trimmed to ``keep``. Oldest by the sidecar's mtime,
        then its capture time: file times can be as coarse as a kernel tick, so snapshots saved back to back
        may share one."""
        folder = self._dir(camera)
        folder.mkdir(parents=True, exist_ok=True)
        found: list[tuple[int, float, str, list[str]]] = []
        for sidecar in folder.glob("*.json"):
            try:
                data = json.loads(sidecar.read_text())
                found.append((sidecar.stat().st_mtime_ns, float(data["capture_time"]), sidecar.stem,
                              [str(e) for e in data["event_ids"]]))
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("snapshots: ignoring unreadable sidecar %s", sidecar)
        for _, _, snapshot_id, events in sorted(found):
            self._add(camera, snapshot_id, events)

    def _add(self, camera: str, snapshot_id: str, events: list[str]) -> None:
        ring = self._by_camera[camera]
        ring[snapshot_id] = events
        for event_id in events:
            self._events[event_id] = (camera, snapshot_id)
        while len(ring) > self._keep[camera]:
            old, old_events = ring.popitem(last=False)
            for event_id in old_events:
                self._events.pop(event_id, None)
            for suffix in (".jpg", ".json"):
                (self._dir(camera) / f"{old}{suffix}").unlink(missing_ok=True)

    def save(self, job: SnapshotJob, jpeg: bytes, width: int, height: int) -> None:
        folder = self._dir(job.camera_id)
        sidecar = {"snapshot_id": job.snapshot_id, "camera_id": job.camera_id, "frame_seq": job.frame_seq,
                   "capture_time": job.capture_time, "event_ids": list(job.event_ids),
                   "image": {"width": width, "height": height},
                   "boxes": [{"box": list(b.box), "track_id": b.track_id, "class_name": b.class_name,
                              "score": round(b.score, 6)} for b in job.boxes]}
        tmp = folder / f".{job.snapshot_id}.jpg.tmp"
        tmp.write_bytes(jpeg)
        tmp.replace(folder / f"{job.snapshot_id}.jpg")
        tmp = folder / f".{job.snapshot_id}.json.tmp"
        tmp.write_text(json.dumps(sidecar))
        tmp.replace(folder / f"{job.snapshot_id}.json")
        with self._lock:
            self._add(job.camera_id, job.snapshot_id, list(job.event_ids))

    def event_jpeg(self, event_id: str) -> bytes | None:
        with self._lock:
            where = self._events.get(event_id)
        return self._read(*where) if where else None

    def latest_jpeg(self, camera: str) -> bytes | None:
        with self._lock:
            ring = self._by_camera.get(camera)
            newest = next(reversed(ring), None) if ring else None
        return self._read(camera, newest) if newest else None

    def _read(self, camera: str, snapshot_id: str) -> bytes | None:
        try:
            return (self._dir(camera) / f"{snapshot_id}.jpg").read_bytes()
        except OSError:  # trimmed meanwhile
            return None


class SnapshotWorker:
    """One thread encoding queued snapshots, saving them and publishing the newest per camera."""

    def __init__(self, store: SnapshotStore, configs: Mapping[str, SnapshotConfig],
                 publish: Callable[[str, bytes, Sequence[tuple[str, str]]], None], *, queue_size: int = 4) -> None:
        """``publish(camera, jpeg, user_properties)``: the MQTT 5 user properties tie the JPEG to its events."""
        self.store = store
        self._configs = dict(configs)
        self._publish = publish
        self._queue: queue.Queue[SnapshotJob | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self.dropped: dict[str, int] = {c: 0 for c in configs}   # queue full
        self.saved: dict[str, int] = {c: 0 for c in configs}
        self._thread = threading.Thread(target=self._run, name="snapshots", daemon=True)
        self._thread.start()

    def add_camera(self, camera: str, config: SnapshotConfig) -> None:
        """Encode ``camera``'s snapshots with ``config`` from now on (its store keeps ``config.keep`` of them)."""
        self.store.add_camera(camera, config.keep)
        with self._lock:
            self._configs[camera] = config
            self.dropped.setdefault(camera, 0)
            self.saved.setdefault(camera, 0)

    def offer(self, job: SnapshotJob) -> bool:
        """Queue ``job`` without waiting; False (and counted) when the queue is full."""
        try:
            self._queue.put_nowait(job)
            return True
        except queue.Full:
            with self._lock:
                self.dropped[job.camera_id] = self.dropped.get(job.camera_id, 0) + 1
            return False

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                jpeg = encode_snapshot(job, self._configs[job.camera_id])
                height, width = job.pixels.shape[:2]
                self.store.save(job, jpeg, width, height)
                with self._lock:
                    self.saved[job.camera_id] = self.saved.get(job.camera_id, 0) + 1
                self._publish(job.camera_id, jpeg, snapshot_properties(job.snapshot_id, job.event_ids,
                                                                       job.capture_time, job.frame_seq))
            except Exception:  # one bad snapshot must not end the worker
                log.exception("snapshot %s of camera %s failed", job.snapshot_id, job.camera_id)

    def stop(self, timeout: float = 5.0) -> None:
        """Finish what is queued, then end the thread."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            log.warning("snapshots: the worker did not take its stop in %.1f s", timeout)
        self._thread.join(timeout)

    def counters(self) -> dict[str, Any]:
        with self._lock:
            return {"saved": dict(self.saved), "dropped": dict(self.dropped)}
