"""One camera's analytics: a frame's detections in; each row's track id, events and counts out.

:meth:`Analytics.step` filters by class, tracks, then lets each confirmed track seen in the frame settle its zone
and line moves through their hysteresis; a lost track fires nothing until it is seen again or removed. ``seq``
counts a camera's events from 1 without gaps. The rules and the order of events in a frame: docs/analytics.md,
"Events"."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from appliance.analytics.config import AnalyticsConfig
from appliance.analytics.tracker import ByteTracker
from appliance.analytics.zones import Layout, anchor_points
from appliance.detections import NO_TRACK, Detections
from appliance.events import Event, EventType

log = logging.getLogger(__name__)


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
                 new_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        """``new_id`` gives each event its id (32 lowercase hex digits)."""
        self.camera, self.config, self.class_names = camera, config, list(class_names)
        self.width, self.height = width, height
        self._warn_unknown_classes()
        self._new_id = new_id
        self._served: Sequence[str] = class_names
        self._min_score = self._class_min_scores(config)
        self.layout = Layout(config, width, height)
        self.tracker = ByteTracker(config.tracker)
        nz, nl = len(self.layout.zone_names), len(self.layout.line_names)
        self._ids: np.ndarray = np.zeros(0, dtype=np.int64)            # confirmed tracks, ascending
        self._inside: np.ndarray = np.zeros((0, nz), dtype=bool)
        self._since: np.ndarray = np.zeros((0, nz))                    # capture time of the frame it entered
        self._dwell_at: np.ndarray = np.zeros((0, nz))   # capture time its dwell is due; inf: outside, done or none
        self._side: np.ndarray = np.zeros((0, nl), dtype=np.int8)      # side counted for, 0 before any
        # Hysteresis: per line (zone), the frame_seq the anchor went across from the side (membership) counted
        # and the frame_seq it was last seen across; a run goes on while the track is seen across every time.
        self._seen_at: np.ndarray = np.zeros(0, dtype=np.int64)        # frame_seq where last seen
        self._line_run: np.ndarray = np.zeros((0, nl, 2), dtype=np.int64)
        self._zone_run: np.ndarray = np.zeros((0, nz, 2), dtype=np.int64)
        self._last: np.ndarray = np.zeros((0, 2))                      # anchor where last seen
        self._class: np.ndarray = np.zeros(0, dtype=np.int32)  # class and score when last seen, for a lost exit
        self._score: np.ndarray = np.zeros(0, dtype=np.float32)
        self._seq = 0
        self._frame_seq: int | None = None  # the previous step's, for the gap the tracker ages lost tracks by
        self.counts = Counts({n: {"current": 0, "entered": 0, "exited": 0} for n in self.layout.zone_names},
                             {n: {"in": 0, "out": 0} for n in self.layout.line_names})

    def use_classes(self, class_names: Sequence[str]) -> None:
        """Name and filter classes by ``class_names`` (the served model's, after an OTA switch) from this frame
        on; tracks keep their ids and class ids. Cheap when they are the ones in use; none given changes nothing."""
        if not class_names or class_names is self._served or list(class_names) == self.class_names:
            self._served = class_names
            return
        self.class_names, self._served = list(class_names), class_names
        self._min_score = self._class_min_scores(self.config)
        log.info("camera %s: analytics now names and filters classes by the served model's %d class(es)",
                 self.camera, len(self.class_names))
        self._warn_unknown_classes()

    def _warn_unknown_classes(self) -> None:
        unknown = [c for c in self.config.classes or {} if c not in set(self.class_names)]
        if unknown:
            log.warning("camera %s: analytics.classes names %s, which the served model does not know; those "
                        "entries are inactive (the model's classes: %s)", self.camera, ", ".join(unknown),
                        ", ".join(self.class_names))

    def _class_min_scores(self, config: AnalyticsConfig) -> np.ndarray:
        """The minimum score per class id; +inf keeps a class out of the allow-list (and of the tracker)."""
        return np.array([config.min_score if config.classes is None else config.classes.get(c, np.inf)
                         for c in self.class_names], dtype=np.float32)

    @property
    def active_tracks(self) -> int:
        return int(len(self._ids))

    def step(self, frame_seq: int, capture_time: float,
             detections: Detections) -> tuple[np.ndarray, list[Event], bool]:
        """One frame of this camera (in frame order): (the track id of each row of ``detections``, ``NO_TRACK``
        where it has none; events; whether counts changed). Frames missing from the sequence (dropped during a
        recovery, skipped under load) age lost tracks too: the tracker is told the gap in ``frame_seq`` (1 for
        the first frame, or if the sequence went back)."""
        class_ids = detections.class_ids
        known = class_ids < len(self._min_score)
        min_scores = np.full(len(class_ids), np.inf, dtype=np.float32)
        min_scores[known] = self._min_score[class_ids[known]]
        allowed = np.nonzero(np.isfinite(min_scores))[0]
        kept = detections[allowed]
        previous, self._frame_seq = self._frame_seq, frame_seq
        gap = frame_seq - previous if previous is not None and frame_seq > previous else 1
        ts = self.tracker.step(kept.boxes, kept.scores, kept.class_ids.astype(np.int32), min_scores[allowed],
                               frames=gap)
        track_ids = np.full(len(class_ids), NO_TRACK, dtype=np.int64)
        track_ids[allowed[ts.det_index]] = ts.track_ids  # the tracker's rows kept, as rows of the input

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
            self._last[rows], self._seen_at[rows] = points, frame_seq
            self._class[rows], self._score[rows] = det_classes, det_scores
        return track_ids, events, bool(events)

    def replace_layout(self, config: AnalyticsConfig, width: int, height: int) -> None:
        """``config``'s zones, lines and class filter from the next frame on; the tracker, its ids and the event
        numbering go on.
        A zone or line whose name and definition did not change keeps its memberships, sides and counts; a new
        or changed one starts with no one inside, each track on the side of a line it was last seen on."""
        old_zones = {z.name: (i, z) for i, z in enumerate(self.config.zones)}
        old_lines = {ln.name: (i, ln) for i, ln in enumerate(self.config.lines)}
        zmap = [old_zones[z.name][0] if old_zones.get(z.name, (0, None))[1] == z else -1 for z in config.zones]
        lmap = [old_lines[ln.name][0] if old_lines.get(ln.name, (0, None))[1] == ln else -1 for ln in config.lines]

        def remap(array: np.ndarray, mapping: list[int], fresh: object) -> np.ndarray:
            out = np.empty((array.shape[0], len(mapping), *array.shape[2:]), dtype=array.dtype)
            for new, old in enumerate(mapping):
                out[:, new] = array[:, old] if old >= 0 else fresh
            return out

        self._inside, self._since = remap(self._inside, zmap, False), remap(self._since, zmap, 0.0)
        self._dwell_at, self._zone_run = remap(self._dwell_at, zmap, np.inf), remap(self._zone_run, zmap, -2)
        self._side, self._line_run = remap(self._side, lmap, 0), remap(self._line_run, lmap, -2)
        self.config, self.layout = config, Layout(config, width, height)
        self.width, self.height = width, height
        self._min_score = self._class_min_scores(config)
        seen = ~np.isnan(self._last[:, 0])
        fresh = [j for j, old in enumerate(lmap) if old < 0]
        if fresh and seen.any():
            sides = self.layout.sides(self._last[seen])
            for j in fresh:
                self._side[seen, j] = sides[:, j]
        zones, lines = self.counts.zones, self.counts.lines
        self.counts = Counts(
            {z.name: zones[z.name] if zmap[i] >= 0 else {"current": 0, "entered": 0, "exited": 0}
             for i, z in enumerate(config.zones)},
            {ln.name: lines[ln.name] if lmap[i] >= 0 else {"in": 0, "out": 0} for i, ln in enumerate(config.lines)})

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
        self._dwell_at, self._side, self._last = self._dwell_at[keep], self._side[keep], self._last[keep]
        self._seen_at, self._line_run, self._zone_run = self._seen_at[keep], self._line_run[keep], self._zone_run[keep]
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
        self._dwell_at = take(self._dwell_at, np.full(nz, np.inf))
        self._side = take(self._side, np.zeros(nl, dtype=np.int8))
        self._seen_at = take(self._seen_at, np.full((), -1, dtype=np.int64))
        self._line_run = take(self._line_run, np.full((nl, 2), -2, dtype=np.int64))
        self._zone_run = take(self._zone_run, np.full((nz, 2), -2, dtype=np.int64))
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
        if across.any():
            changed = self._zones_settled(rows, across, points, info[3], ctx[0])
            if changed:
                self._zone_events(rows, was, changed, info, events, ctx)
        due = self._dwell_at[rows] <= ctx[1]
        if due.any():
            for r, z in np.argwhere(due).tolist():
                track = int(rows[r])
                events.append(self._seen_event("dwell", ctx, info, r, zone=self.layout.zone_names[z],
                                               dwell_s=ctx[1] - float(self._since[track, z])))
                self._dwell_at[track, z] = np.inf

    def _zones_settled(self, rows: np.ndarray, across: np.ndarray, points: np.ndarray, boxes: np.ndarray,
                       frame_seq: int) -> list[tuple[int, int]]:
        """The (row, zone) memberships that change now: of those ``across`` (the anchor on the other side of the
        zone's edge from the membership counted), the ones the zone's hysteresis lets through. Few cells: plain
        Python, numpy's per-call cost would dominate."""
        changed = []
        for r, z in np.argwhere(across).tolist():
            track = int(rows[r])
            first = self._across(self._zone_run, track, z, frame_seq)
            margin, frames = self.layout.zone_hysteresis[z]
            if frame_seq - first + 1 >= frames or \
                    self.layout.edge_distance(z, points[r]) >= margin * float(boxes[r, 3] - boxes[r, 1]):
                self._zone_run[track, z, 1] = -2
                changed.append((r, z))
        return changed

    def _across(self, runs: np.ndarray, track: int, item: int, frame_seq: int, start: bool = True) -> int:
        """The frame_seq the run of ``track`` across ``item`` began, this frame added to it (``runs[track, item]``
        holds [first, last] frame_seq). It goes on when the track was across the last time it was seen; else
        one starts now, or, when not ``start``, -1 says none goes on."""
        first, last = runs[track, item].tolist()
        if last == self._seen_at[track] and first <= frame_seq:
            runs[track, item, 1] = frame_seq
            return int(first)
        if not start:
            return -1
        runs[track, item] = frame_seq
        return frame_seq

    def _zone_events(self, rows: np.ndarray, was: np.ndarray, changed: list[tuple[int, int]], info: tuple,
                     events: list[Event], ctx: tuple[int, float]) -> None:
        """Exits, then enters, of the ``changed`` (row, zone) memberships, in row order."""
        for r, z in changed:
            self._inside[rows[r], z] = not was[r, z]
        for r, z in changed:
            if was[r, z]:
                events.append(self._seen_event("exit", ctx, info, r, zone=self.layout.zone_names[z]))
                self._count_zone(z, "exited", -1)
                self._dwell_at[rows[r], z] = np.inf
        for r, z in changed:
            if not was[r, z]:
                events.append(self._seen_event("enter", ctx, info, r, zone=self.layout.zone_names[z]))
                self._count_zone(z, "entered", +1)
                self._since[rows[r], z] = ctx[1]
                self._dwell_at[rows[r], z] = ctx[1] + self.layout.dwell_s[z]

    def _lines(self, rows: np.ndarray, points: np.ndarray, info: tuple, events: list[Event],
               ctx: tuple[int, float]) -> None:
        if not self.layout.line_names:
            return
        reach = self.layout.reach(points)
        side = self._side[rows]
        across = np.sign(reach) * side < 0   # off the line, on the other side from the one counted for
        if across.any():
            for r, line in np.argwhere(across).tolist():
                track = int(rows[r])
                first = self._across(self._line_run, track, line, ctx[0], start=False)
                if first < 0:   # a new run: only a move that met the line starts one
                    if not self.layout.crossed(self._last[track], points[r], line):
                        side[r, line] *= -1   # around the line's end: on the other side, no crossing
                        continue
                    first = self._line_run[track, line] = ctx[0]   # [first, last] seen across: now
                margin, frames = self.layout.line_hysteresis[line]
                if ctx[0] - first + 1 < frames and \
                        abs(float(reach[r, line])) < margin * float(info[3][r, 3] - info[3][r, 1]):
                    continue
                self._line_run[track, line, 1], side[r, line] = -2, -side[r, line]
                direction: Literal["in", "out"] = "in" if side[r, line] == self.layout.in_sign[line] else "out"
                events.append(self._seen_event("cross", ctx, info, r, line=self.layout.line_names[line],
                                               direction=direction))
                self.counts.lines[self.layout.line_names[line]][direction] += 1
        if not side.all():  # a track born exactly on a line takes the first side it is seen on
            side = np.where(side != 0, side, np.sign(reach)).astype(np.int8)
        self._side[rows] = side

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
        return Event(event_id=self._new_id(), camera_id=self.camera, seq=self._seq, event=kind, track_id=track_id,
                     class_id=class_id, class_name=name, score=score, capture_time=ctx[1], frame_seq=ctx[0],
                     image_width=self.width, image_height=self.height, box=box, **extra)  # type: ignore[arg-type]
