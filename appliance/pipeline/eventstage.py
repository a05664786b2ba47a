"""The analytics stage of the frame path: one camera's tracker, zones and lines on each result, in frame order.

The state (tracks, zone memberships, counters, event numbers) lives here, one ``Analytics`` per camera, not in a
Triton model, so it survives an OTA switch and a model recovery. It runs on the completion thread, in frame
order; each detection gets its track id by row (the tracker names the rows it kept). docs/analytics.md has
its cost (``appliance bench analytics``) and what goes where.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np

from appliance.analytics.config import AnalyticsConfig
from appliance.analytics.draw import DrawnLine, DrawnZone, boxes_of
from appliance.analytics.events import Analytics
from appliance.events import ClipPlan, Event
from appliance.mqtt.messages import DetectionsMessage
from appliance.pipeline.sink import Counts, Sinks
from appliance.pipeline.snapshots import SnapshotJob, SnapshotStore, SnapshotWorker

log = logging.getLogger(__name__)


class ClipPlanner(Protocol):
    """appliance.pipeline.clipkeeper.ClipKeeper."""

    def plan(self, event_id: str, camera_id: str, event_time: float) -> ClipPlan | None: ...


# publish_snapshot(camera_id, jpeg, user_properties): appliance.mqtt.publisher.MqttPublisher.publish_snapshot
PublishSnapshot = Callable[[str, bytes, Sequence[tuple[str, str]]], None]


class AnalyticsMetrics(Protocol):
    """appliance.health.metrics.ApplianceMetrics."""

    def record_analytics_step(self, camera_id: str, seconds: float, event_types: Sequence[str]) -> None: ...


class CameraSpec(Protocol):
    """appliance.capture.config.CameraConfig: what the analytics need of a camera."""

    @property
    def id(self) -> str: ...
    @property
    def frame_size(self) -> tuple[int, int]: ...
    @property
    def analytics(self) -> AnalyticsConfig | None: ...


@dataclass(frozen=True)
class StageParts:
    """What every camera's analytics stage works with: where its results go, what it counts, the snapshot
    worker (None: no snapshots), who plans its events' clips (None: no camera records)."""

    sinks: Sinks
    metrics: AnalyticsMetrics
    snapshots: SnapshotWorker | None = None
    clips: ClipPlanner | None = None
    clock: Callable[[], float] = time.monotonic


class CameraAnalytics:
    """One camera's analytics and what it hands to the sinks. ``step`` is called in the camera's frame order."""

    def __init__(self, camera: CameraSpec, class_names: Sequence[str], parts: StageParts) -> None:
        """``camera`` must have an ``analytics:`` section."""
        if camera.analytics is None:
            raise ValueError(f"camera {camera.id} has no analytics section")
        config = camera.analytics
        self._clips = parts.clips
        self.camera_id, self.config = camera.id, config
        self.width, self.height = camera.frame_size
        self.analytics = Analytics(camera.id, config, class_names, self.width, self.height)
        self._sinks, self._metrics, self._snapshots = parts.sinks, parts.metrics, parts.snapshots
        self._clock = parts.clock
        self._lock = threading.Lock()  # step (completion thread) against the tick's reads
        # Held from reading the counts to handing them over (then _lock inside it), so the sinks get counts in the
        # order they were read: a reset is never followed by counts read before it.
        self._send_lock = threading.Lock()
        self._last_seq = 0
        self._counts_sent = float("-inf")
        self.events_by_type: Counter[str] = Counter()
        self.snapshots_dropped = 0
        self._pending: tuple[list[Event], bool] = ([], False)  # the frame's events; whether counts changed

    @property
    def wants_frames(self) -> bool:
        """Whether the frame path must copy each frame's pixels at submit (snapshots on)."""
        return self._snapshots is not None and self.config.snapshots.enabled

    def step(self, meta: Any, message: DetectionsMessage, pixels: np.ndarray | None) -> DetectionsMessage:
        """``message`` with every detection's ``track_id`` set; the snapshot handed to the worker; the events and
        counts' change noted for :meth:`publish_pending`, which the frame path calls once the sinks have the
        message."""
        started = time.perf_counter()
        with self._lock:
            self.analytics.use_classes(message.detections.class_names)  # the served model's, from a switch on
            track_ids, events, changed = self.analytics.step(int(meta.seq), float(meta.t_utc), message.detections)
            message = dataclasses.replace(message, detections=message.detections.with_track_ids(track_ids))
            if events:
                self._last_seq = events[-1].seq
                self.events_by_type.update(e.event for e in events)
            snapshot_id = self._snapshot(meta, message, events, pixels) if events else None
            self._pending = ([self._with_proofs(e, snapshot_id) for e in events], bool(changed))
        elapsed = time.perf_counter() - started
        self._metrics.record_analytics_step(self.camera_id, elapsed, [e.event for e in events])
        return message

    def apply_layout(self, config: AnalyticsConfig) -> None:
        """``config``'s zones and lines from the next frame on (Analytics.replace_layout: tracks keep their ids)."""
        with self._lock:
            self.analytics.replace_layout(config, self.width, self.height)
            self.config = config

    def publish_pending(self) -> None:
        """After the frame's detections were spooled: its events (so they follow it in the spool), then the counts
        as they are now (read here, not at the step, so a reset in between is never undone)."""
        events, changed = self._pending
        self._pending = ([], False)
        with self._send_lock:
            if events:
                self._sinks.hand_events(events)
            if changed:
                with self._lock:
                    counts = self._counts_locked()
                self._send_counts(*counts, changed=True)

    def reset_line(self, line: str) -> bool:
        """A line's in/out counts back to 0 (an OPC UA operator's ResetCounts), sent at once; False when the
        camera has no such line."""
        with self._send_lock:
            with self._lock:
                if line not in self.analytics.counts.lines:
                    return False
                self.analytics.counts.lines[line] = {direction: 0 for direction in self.analytics.counts.lines[line]}
                counts = self._counts_locked()
            self._send_counts(*counts, changed=True)
        return True

    def _snapshot(self, meta: Any, message: DetectionsMessage, events: list[Event],
                  pixels: np.ndarray | None) -> str | None:
        if pixels is None or self._snapshots is None:
            return None
        boxes = boxes_of(message.detections, message.image_width, message.image_height)
        job = SnapshotJob(uuid.uuid4().hex, self.camera_id, int(meta.seq), float(meta.t_utc), pixels,
                          str(meta.pixel_format), boxes, [e.event_id for e in events],
                          frozenset(e.track_id for e in events))
        if self._snapshots.offer(job):
            return job.snapshot_id
        self.snapshots_dropped += 1
        return None

    def _with_proofs(self, e: Event, snapshot_id: str | None) -> Event:
        """``e`` with the snapshot of its frame and its clip's plan (when the camera records)."""
        clip = self._clips.plan(e.event_id, self.camera_id, e.capture_time) if self._clips else None
        return dataclasses.replace(e, snapshot_id=snapshot_id, clip=clip) if snapshot_id or clip else e

    def _counts_locked(self) -> tuple[int, int, dict[str, Any]]:
        return self._last_seq, self.analytics.active_tracks, self.analytics.counts.as_dict()

    def _send_counts(self, last_seq: int, active: int, counts: Mapping[str, Any], *, changed: bool = False) -> None:
        """To the sinks (``changed`` False: the tick's repeat); the caller holds ``_send_lock``."""
        self._counts_sent = self._clock()
        self._sinks.hand_counts(Counts(self.camera_id, last_seq, active, counts, changed))

    def publish_counts_if_due(self) -> None:
        """The tick: the retained counts again once ``counts_interval_s`` passed since the last time."""
        if self._clock() - self._counts_sent < self.config.counts_interval_s:
            return
        with self._send_lock:
            with self._lock:
                counts = self._counts_locked()
            self._send_counts(*counts)

    def overlay(self) -> tuple[list[DrawnZone], list[DrawnLine]]:
        """The zones with how many tracks are in each now, the lines with their counts: what the restream draws."""
        with self._lock:
            layout, counts = self.analytics.layout, self.analytics.counts
            zones = [DrawnZone(name, [(float(x), float(y)) for x, y in polygon.tolist()],
                               counts.zones.get(name, {}).get("current"))
                     for name, polygon in zip(layout.zone_names, layout.polygons)]
            lines = [DrawnLine(ln.name, (float(ln.a[0]), float(ln.a[1])), (float(ln.b[0]), float(ln.b[1])),
                               dict(counts.lines.get(ln.name, {}))) for ln in layout.lines]
        return zones, lines

    def summary(self) -> dict[str, Any]:
        """What the health summary and ``/metrics`` show of this camera."""
        with self._lock:
            last_seq, active, counts = self._counts_locked()
            by_type = dict(self.events_by_type)
        return {"active_tracks": active, "events": sum(by_type.values()), "events_by_type": by_type,
                "last_event_seq": last_seq, "snapshots_dropped": self.snapshots_dropped, **counts}


def start_analytics(cameras: Sequence[CameraSpec], class_names: Sequence[str], parts: StageParts, snapshot_dir: Path,
                    publish_snapshot: PublishSnapshot) -> tuple[dict[str, CameraAnalytics], StageParts]:
    """One CameraAnalytics per camera with an ``analytics:`` section, and the parts they share, with the snapshot
    worker when a camera takes snapshots (``publish_snapshot`` sends each one's JPEG)."""
    with_analytics = [c for c in cameras if c.analytics is not None]
    snapping = {c.id: c.analytics.snapshots for c in with_analytics
                if c.analytics is not None and c.analytics.snapshots.enabled}
    if snapping:
        store = SnapshotStore(snapshot_dir, {cam: cfg.keep for cam, cfg in snapping.items()})
        parts = dataclasses.replace(parts, snapshots=SnapshotWorker(store, snapping, publish_snapshot))
    return {c.id: camera_stage(c, class_names, parts) for c in with_analytics}, parts


def camera_stage(camera: CameraSpec, class_names: Sequence[str], parts: StageParts) -> CameraAnalytics:
    """The analytics stage of one camera with an ``analytics:`` section; its snapshots go to ``parts.snapshots``
    (a camera it does not know yet is added to it: one a reload started) when they are on and a worker runs."""
    assert camera.analytics is not None
    worker = parts.snapshots
    snapping = camera.analytics.snapshots.enabled and worker is not None
    if snapping and worker is not None:
        worker.add_camera(camera.id, camera.analytics.snapshots)
    elif camera.analytics.snapshots.enabled:
        log.warning("camera %s: snapshots stay off until the appliance restarts (none of the cameras it started "
                    "with takes snapshots, so no snapshot worker runs)", camera.id)
    stage = CameraAnalytics(camera, class_names, parts if snapping else dataclasses.replace(parts, snapshots=None))
    log.info("camera %s: analytics on (%d zone(s), %d line(s), snapshots %s)", camera.id,
             len(camera.analytics.zones), len(camera.analytics.lines), "on" if snapping else "off")
    return stage
