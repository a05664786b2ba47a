"""One camera's analytics: a frame's detections in; tracked detections, events and counts out.

:meth:`Analytics.step` per frame, in order:

1. Drop detections of classes outside the allow-list; each kept one gets its class's minimum score.
2. Track (:class:`~appliance.analytics.tracker.ByteTracker`): each kept detection gets a ``track_id``, or
   ``NO_TRACK`` (-1) while its track is not confirmed yet.
3. For every confirmed track seen in this frame, its box's anchor point (bottom centre by default) decides:
   - zones: ``enter`` when the point has moved into a zone, ``exit`` when it has moved out, each once the
     zone's hysteresis agrees (below); ``dwell`` once per stay, at the first frame the track is seen after
     having been inside (since its ``enter``) for the zone's ``dwell_s``;
   - lines: a crossing starts when the point's move since the track was last seen meets the line segment and
     ends on the other side, and ``cross`` fires once the line's hysteresis agrees; ``direction`` is ``in``
     when it ends on the configured ``in_side``, else ``out``. A move that ends exactly on the line is not a
     crossing yet; the side it came from is remembered.
   Hysteresis: the event waits until the point is ``margin`` x its box's height past the line (or inside or
   outside the zone's edge), or has been seen on the new side ``frames`` times in a row; a step back to the
   old side first cancels it. The event carries the frame that settled it.
   A lost track (occluded, not seen this frame) keeps its zones and sides: nothing fires for it until it is
   seen again or removed; a removed track ``exit``s every zone it was in (``track_lost: true``).
4. Counters: per zone ``current`` (confirmed tracks inside, lost ones included), ``entered``, ``exited``; per
   line ``in`` and ``out``.

Events carry the triggering frame's ``frame_seq``, its ``capture_time`` and the box of that frame's detection,
so a snapshot of that frame shows exactly what decided the event. Within a frame events come in the order
exits of removed tracks, exits, enters, crossings, dwells, each by track id then zone or line order; ``seq``
counts a camera's events from 1 without gaps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from appliance.analytics.config import AnalyticsConfig
from appliance.analytics.tracker import ByteTracker
from appliance.analytics.zones import Layout, anchor_points

EventType = Literal["enter", "exit", "cross", "dwell"]


class DetectionArrays(Protocol):
    """What a frame's detections look like (appliance.processing.pipeline.Detections fits)."""

    @property
    def boxes(self) -> np.ndarray: ...     # [K, 4] xyxy frame pixels
    @property
    def scores(self) -> np.ndarray: ...    # [K]
    @property
    def class_ids(self) -> np.ndarray: ...  # [K]


@dataclass(frozen=True)
class TrackedDetections:
    boxes: np.ndarray      # [K, 4] float32 xyxy
    scores: np.ndarray     # [K] float32
    class_ids: np.ndarray  # [K] int32
    track_ids: np.ndarray  # [K] int64, -1 where the track is not confirmed yet


@dataclass(frozen=True)
class Event:
    event_id: str
    seq: int
    type: EventType
    camera: str
    track_id: int
    class_id: int
    class_name: str
    score: float
    capture_time: float
    frame_seq: int
    zone: str | None = None
    line: str | None = None
    direction: Literal["in", "out"] | None = None   # cross only
    box: tuple[float, float, float, float] | None = None  # xyxy in the triggering frame; None for a lost track
    dwell_s: float | None = None   # dwell only: seconds inside when it fired
    track_lost: bool = False       # exit only: the track was removed after being lost, not seen leaving


@dataclass
class Counts:
    zones: dict[str, dict[str, int]] = field(default_factory=dict)   # name -> current, entered, exited
    lines: dict[str, dict[str, int]] = field(default_factory=dict)   # name -> in, out

    def as_dict(self) -> dict[str, dict[str, dict[str, int]]]:
        return {"zones": {k: dict(v) for k, v in self.zones.items()},
                "lines": {k: dict(v) for k, v in self.lines.items()}}


class Analytics:
    """Per-camera tracker, zone and line state. Plain object: a model switch or recovery does not touch it."""

    def __init__(self, camera: str, config: AnalyticsConfig, class_names: Sequence[str], width: int, height: int,
                 new_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        unknown = sorted(set(config.classes or {}) - set(class_names))
        if unknown:
            raise ValueError(f"camera {camera!r}: analytics names unknown classes {unknown}")
        self.camera, self.config, self.class_names = camera, config, list(class_names)
        self._new_id = new_id
        # min score per class id; +inf keeps a class out of the allow-list (and of the tracker).
        self._min_score = np.array([config.min_score if config.classes is None else config.classes.get(c, np.inf)
                                    for c in class_names], dtype=np.float32)
        self.layout = Layout(config, width, height)
        self.tracker = ByteTracker(config.tracker)
        nz, nl = len(self.layout.zone_names), len(self.layout.line_names)
        self._ids: np.ndarray = np.zeros(0, dtype=np.int64)            # confirmed tracks, ascending
        self._inside: np.ndarray = np.zeros((0, nz), dtype=bool)
        self._since: np.ndarray = np.zeros((0, nz))                    # capture time of the frame it entered
        self._dwelt: np.ndarray = np.zeros((0, nz), dtype=bool)
        self._side: np.ndarray = np.zeros((0, nl), dtype=np.int8)      # side counted for, 0 before any
        self._pending: np.ndarray = np.zeros((0, nl), dtype=np.int8)   # side crossed to, not counted yet; 0 none
        self._line_frames: np.ndarray = np.zeros((0, nl), dtype=np.int32)  # frames seen on the pending side
        self._zone_frames: np.ndarray = np.zeros((0, nz), dtype=np.int32)  # frames seen across from _inside
        self._last: np.ndarray = np.zeros((0, 2))                      # anchor where last seen
        self._class: np.ndarray = np.zeros(0, dtype=np.int32)  # class and score when last seen, for a lost exit
        self._score: np.ndarray = np.zeros(0, dtype=np.float32)
        self._seq = 0
        self._frame_seq: int | None = None  # the previous step's, for the gap the tracker ages lost tracks by
        self.counts = Counts({n: {"current": 0, "entered": 0, "exited": 0} for n in self.layout.zone_names},
                             {n: {"in": 0, "out": 0} for n in self.layout.line_names})

    @property
    def active_tracks(self) -> int:
        return int(len(self._ids))

    def step(self, frame_seq: int, capture_time: float,
             detections: DetectionArrays) -> tuple[TrackedDetections, list[Event], bool]:
        """One frame of this camera (in frame order): (tracked detections, events, whether counts changed).
        Frames missing from the sequence (dropped during a recovery, skipped under load) age lost tracks too:
        the tracker is told the gap in ``frame_seq`` (1 for the first frame, or if the sequence went back)."""
        class_ids = np.asarray(detections.class_ids, dtype=np.int64)
        known = (class_ids >= 0) & (class_ids < len(self._min_score))
        min_scores = np.full(len(class_ids), np.inf, dtype=np.float32)
        min_scores[known] = self._min_score[class_ids[known]]
        allowed = np.nonzero(np.isfinite(min_scores))[0]
        boxes = np.asarray(detections.boxes, dtype=np.float32)[allowed]
        scores = np.asarray(detections.scores, dtype=np.float32)[allowed]
        classes = class_ids[allowed].astype(np.int32)
        previous, self._frame_seq = self._frame_seq, frame_seq
        gap = frame_seq - previous if previous is not None and frame_seq > previous else 1
        ts = self.tracker.step(boxes, scores, classes, min_scores[allowed], frames=gap)
        tracked = TrackedDetections(boxes[ts.det_index], scores[ts.det_index], classes[ts.det_index], ts.track_ids)

        events: list[Event] = []
        ctx = (frame_seq, capture_time)
        self._drop_removed(ts.removed_ids, events, ctx)
        order = np.argsort(ts.ids, kind="stable")
        ids, seen = ts.ids[order], ts.seen[order]
        self._align(ids, ts.first_boxes[order])
        rows = np.nonzero(seen >= 0)[0]
        if len(rows):
            det_boxes = ts.boxes[order][rows]
            det_scores = ts.scores[order][rows]
            det_classes = ts.class_ids[order][rows]
            points = anchor_points(det_boxes, self.config.anchor)
            info = (ids[rows], det_classes, det_scores, det_boxes)
            self._zones(rows, points, info, events, ctx)
            self._lines(rows, points, info, events, ctx)
            self._last[rows] = points
            self._class[rows], self._score[rows] = det_classes, det_scores
        return tracked, events, bool(events)

    # -- state per confirmed track --------------------------------------------------------------------------

    def _drop_removed(self, removed: np.ndarray, events: list[Event], ctx: tuple[int, float]) -> None:
        if len(removed) == 0 or len(self._ids) == 0:
            return
        gone = np.isin(self._ids, removed)
        for r, z in zip(*np.nonzero(self._inside & gone[:, None])):
            events.append(self._event("exit", ctx, int(self._ids[r]), int(self._class[r]), float(self._score[r]), None,
                                      zone=self.layout.zone_names[z], track_lost=True))
            self._count_zone(z, "exited", -1)
        keep = ~gone
        self._ids, self._inside, self._since = self._ids[keep], self._inside[keep], self._since[keep]
        self._dwelt, self._side, self._last = self._dwelt[keep], self._side[keep], self._last[keep]
        self._pending, self._line_frames = self._pending[keep], self._line_frames[keep]
        self._zone_frames = self._zone_frames[keep]
        self._class, self._score = self._class[keep], self._score[keep]

    def _align(self, ids: np.ndarray, first_boxes: np.ndarray) -> None:
        """Rows of the state for ``ids`` (ascending): existing tracks keep theirs; new ones start outside every
        zone, with the anchor and line sides of the detection that started them (their birth, not their
        confirmation), so a line crossed during the birth buffer is still seen as crossed."""
        if np.array_equal(ids, self._ids):
            return
        pos = np.searchsorted(self._ids, ids)
        existing = (pos < len(self._ids)) & (self._ids[np.minimum(pos, max(len(self._ids) - 1, 0))] == ids) \
            if len(self._ids) else np.zeros(len(ids), dtype=bool)
        src = np.where(existing, pos, 0)
        nz, nl = self._inside.shape[1], self._side.shape[1]

        def take(array: np.ndarray, fresh: np.ndarray) -> np.ndarray:
            out = np.repeat(fresh[None], len(ids), axis=0)
            if len(self._ids):
                out[existing] = array[src[existing]]
            return out

        self._inside = take(self._inside, np.zeros(nz, dtype=bool))
        self._since = take(self._since, np.zeros(nz))
        self._dwelt = take(self._dwelt, np.zeros(nz, dtype=bool))
        self._side = take(self._side, np.zeros(nl, dtype=np.int8))
        self._pending = take(self._pending, np.zeros(nl, dtype=np.int8))
        self._line_frames = take(self._line_frames, np.zeros(nl, dtype=np.int32))
        self._zone_frames = take(self._zone_frames, np.zeros(nz, dtype=np.int32))
        self._last = take(self._last, np.full(2, np.nan))
        self._class = take(self._class, np.zeros((), dtype=np.int32))
        self._score = take(self._score, np.zeros((), dtype=np.float32))
        self._ids = ids
        if not existing.all() and len(ids):
            new = np.nonzero(~existing)[0]
            born_at = anchor_points(first_boxes[new], self.config.anchor)
            self._last[new] = born_at
            if nl:
                self._side[new] = self.layout.sides(born_at)

    def _zones(self, rows: np.ndarray, points: np.ndarray, info: tuple, events: list[Event],
               ctx: tuple[int, float]) -> None:
        if not self.layout.zone_names:
            return
        was = self._inside[rows]
        across = self.layout.inside(points) != was
        frames = np.where(across, self._zone_frames[rows] + 1, 0)
        due = np.zeros_like(across)
        if across.any():
            r, z = np.nonzero(across)
            heights = info[3][r, 3] - info[3][r, 1]
            far = self.layout.edge_distance(points[r], z) >= self.layout.zone_margin[z] * heights
            due[r, z] = far | (frames[r, z] >= self.layout.zone_frames[z])
        now = was ^ due
        exits, enters = due & was, due & ~was
        for r, z in zip(*np.nonzero(exits)):
            events.append(self._seen_event("exit", ctx, info, r, zone=self.layout.zone_names[z]))
            self._count_zone(z, "exited", -1)
        for r, z in zip(*np.nonzero(enters)):
            events.append(self._seen_event("enter", ctx, info, r, zone=self.layout.zone_names[z]))
            self._count_zone(z, "entered", +1)
        since = self._since[rows]
        since[enters] = ctx[1]
        dwelt = self._dwelt[rows] & now
        stayed = ctx[1] - since
        due_dwell = now & ~dwelt & (stayed >= self.layout.dwell_s[None, :])
        for r, z in zip(*np.nonzero(due_dwell)):
            events.append(self._seen_event("dwell", ctx, info, r, zone=self.layout.zone_names[z],
                                           dwell_s=float(stayed[r, z])))
        self._inside[rows], self._since[rows], self._dwelt[rows] = now, since, dwelt | due_dwell
        self._zone_frames[rows] = np.where(due, 0, frames)

    def _lines(self, rows: np.ndarray, points: np.ndarray, info: tuple, events: list[Event],
               ctx: tuple[int, float]) -> None:
        if not self.layout.line_names:
            return
        offsets = self.layout.offsets(points)
        now = np.sign(offsets).astype(np.int8)
        side, pending = self._side[rows], self._pending[rows]
        starts = (pending == 0) & (side != 0) & (now != 0) & (now != side)
        if not (starts.any() or pending.any()):
            self._side[rows] = np.where(side != 0, side, now)  # a track born on a line takes its first side
            return
        for line in np.flatnonzero(starts.any(axis=0)):
            movers = np.nonzero(starts[:, line])[0]
            met = self.layout.crossed(self._last[rows[movers]], points[movers], int(line))
            pending[movers[met], line] = now[movers[met], line]
            side[movers[~met], line] = now[movers[~met], line]  # around the line's end: no crossing
        pending[(pending != 0) & (now == side)] = 0  # stepped back before it counted
        on_new = (pending != 0) & (now == pending)
        frames = np.where(on_new, self._line_frames[rows] + 1, 0)
        heights = info[3][:, 3] - info[3][:, 1]
        far = np.abs(offsets) >= self.layout.line_margin[None, :] * heights[:, None]
        due = on_new & (far | (frames >= self.layout.line_frames[None, :]))
        for r, line in zip(*np.nonzero(due)):
            direction: Literal["in", "out"] = "in" if pending[r, line] == self.layout.in_sign[line] else "out"
            events.append(self._seen_event("cross", ctx, info, r, line=self.layout.line_names[line],
                                           direction=direction))
            self.counts.lines[self.layout.line_names[line]][direction] += 1
        side = np.where(due, pending, side)
        self._side[rows] = np.where(side != 0, side, now)
        self._pending[rows] = np.where(due, 0, pending)
        self._line_frames[rows] = np.where(due, 0, frames)

    # -- events and counters --------------------------------------------------------------------------------

    def _count_zone(self, zone: int, total: str, change: int) -> None:
        counts = self.counts.zones[self.layout.zone_names[zone]]
        counts[total] += 1
        counts["current"] += change

    def _seen_event(self, kind: EventType, ctx: tuple[int, float], info: tuple, r: int, **extra: object) -> Event:
        ids, classes, scores, boxes = info
        box = boxes[r]
        return self._event(kind, ctx, int(ids[r]), int(classes[r]), float(scores[r]),
                           (float(box[0]), float(box[1]), float(box[2]), float(box[3])), **extra)

    def _event(self, kind: EventType, ctx: tuple[int, float], track_id: int, class_id: int, score: float,
               box: tuple[float, float, float, float] | None, **extra: object) -> Event:
        self._seq += 1
        name = self.class_names[class_id] if 0 <= class_id < len(self.class_names) else ""
        return Event(event_id=self._new_id(), seq=self._seq, type=kind, camera=self.camera, track_id=track_id,
                     class_id=class_id, class_name=name, score=score, capture_time=ctx[1], frame_seq=ctx[0],
                     box=box, **extra)  # type: ignore[arg-type]
