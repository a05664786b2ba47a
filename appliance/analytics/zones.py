"""A camera's zones and lines in frame pixels, and the per-frame questions asked of them for all tracks at once:
which zones each anchor point is in, which side of each line it is on and how far, whether a move crossed a
line, and how far a point is from a zone's edge."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from appliance.analytics.config import Anchor, AnalyticsConfig, PointXY
from appliance.analytics.geometry import crosses_segment


def anchor_points(boxes: np.ndarray, anchor: Anchor) -> np.ndarray:
    """``[N, 4]`` xyxy boxes -> ``[N, 2]`` the point that stands for each box (bottom centre: where a person or
    a carton touches the floor)."""
    x = (boxes[:, 0] + boxes[:, 2]) * 0.5
    if anchor == "bottom_center":
        y = boxes[:, 3]
    elif anchor == "top_center":
        y = boxes[:, 1]
    else:
        y = (boxes[:, 1] + boxes[:, 3]) * 0.5
    return np.stack([x, y], axis=1)


def _pixels(points: list[PointXY] | tuple[PointXY, ...], units: str, width: int, height: int) -> np.ndarray:
    array = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return array * np.array([width, height], dtype=np.float64) if units == "normalized" else array


@dataclass(frozen=True)
class Line:
    name: str
    a: np.ndarray   # [2] pixels
    b: np.ndarray   # [2] pixels
    in_sign: int    # the sides() value of the "in" side: +1 right of a->b, -1 left


class Layout:
    """Zones and lines of one camera, resolved to pixels of its ``width`` x ``height`` frame.

    Every zone's edges sit in one array (zone after zone) and every line's ends in another, so a frame asks
    "which zones is each point in" and "which side of each line" with one broadcast each, whatever the number
    of zones and lines.
    """

    def __init__(self, config: AnalyticsConfig, width: int, height: int) -> None:
        self.zone_names = [z.name for z in config.zones]
        self.polygons = [_pixels(z.points, z.units, width, height) for z in config.zones]
        self.dwell_s = np.array([z.dwell_s if z.dwell_s is not None else np.inf for z in config.zones])
        starts = np.concatenate(self.polygons) if self.polygons else np.zeros((0, 2))
        ends = np.concatenate([np.roll(p, -1, axis=0) for p in self.polygons]) if self.polygons else starts
        self._x1, self._y1 = starts[:, 0], starts[:, 1]
        self._y2 = ends[:, 1]
        dy = ends[:, 1] - starts[:, 1]
        self._slope = (ends[:, 0] - starts[:, 0]) / np.where(dy == 0, 1.0, dy)  # dx/dy; horizontal edges never count
        self._zone_start = np.cumsum([0] + [len(p) for p in self.polygons[:-1]]).astype(np.intp)
        self._edge_start, self._edge = starts, ends - starts
        self._edge_len2 = np.maximum((self._edge ** 2).sum(axis=1), 1e-12)
        self.zone_margin = np.array([z.hysteresis.margin for z in config.zones], dtype=np.float64)
        self.zone_frames = np.array([z.hysteresis.frames for z in config.zones], dtype=np.int32)
        self.lines = []
        for line in config.lines:
            a, b = _pixels((line.a, line.b), line.units, width, height)
            self.lines.append(Line(line.name, a, b, 1 if line.in_side == "right" else -1))
        self.line_names = [ln.name for ln in self.lines]
        self.in_sign = np.array([ln.in_sign for ln in self.lines], dtype=np.int8)
        self._a = np.array([ln.a for ln in self.lines]).reshape(-1, 2)
        self._ab = np.array([ln.b - ln.a for ln in self.lines]).reshape(-1, 2)
        self._ab_len = np.hypot(self._ab[:, 0], self._ab[:, 1])
        self.line_margin = np.array([ln.hysteresis.margin for ln in config.lines], dtype=np.float64)
        self.line_frames = np.array([ln.hysteresis.frames for ln in config.lines], dtype=np.int32)

    def inside(self, points: np.ndarray) -> np.ndarray:
        """``[N, 2]`` -> ``[N, Z]`` bool (even-odd ray casting against every zone's edges at once)."""
        if not self.polygons or len(points) == 0:
            return np.zeros((len(points), len(self.polygons)), dtype=bool)
        x, y = points[:, 0:1], points[:, 1:2]
        straddles = (self._y1 > y) != (self._y2 > y)
        hits = straddles & (x < self._x1 + (y - self._y1) * self._slope)
        return np.add.reduceat(hits, self._zone_start, axis=1) % 2 == 1

    def sides(self, points: np.ndarray) -> np.ndarray:
        """``[N, 2]`` -> ``[N, L]`` int8: +1 right of a->b (as displayed, y down), -1 left, 0 on the line."""
        return np.sign(self._cross(points)).astype(np.int8)

    def offsets(self, points: np.ndarray) -> np.ndarray:
        """``[N, 2]`` -> ``[N, L]`` signed pixels from each (infinite) line, its sign that of :meth:`sides`."""
        return self._cross(points) / self._ab_len

    def _cross(self, points: np.ndarray) -> np.ndarray:
        return self._ab[:, 0] * (points[:, 1:2] - self._a[:, 1]) - self._ab[:, 1] * (points[:, 0:1] - self._a[:, 0])

    def edge_distance(self, points: np.ndarray, zones: np.ndarray) -> np.ndarray:
        """``[M, 2]`` points and ``[M]`` zone indices -> ``[M]`` pixels from each point to its zone's nearest edge."""
        rel = points[:, None, :] - self._edge_start[None]                                   # [M, E, 2]
        t = np.clip((rel * self._edge).sum(axis=2) / self._edge_len2, 0.0, 1.0)             # [M, E]
        gap = rel - t[..., None] * self._edge
        dist = np.hypot(gap[..., 0], gap[..., 1])
        return np.minimum.reduceat(dist, self._zone_start, axis=1)[np.arange(len(points)), zones]

    def crossed(self, before: np.ndarray, after: np.ndarray, line: int) -> np.ndarray:
        """``[N, 2]`` moves -> ``[N]`` bool: the move met line ``line`` between its two ends."""
        ln = self.lines[line]
        return crosses_segment(before, after, ln.a, ln.b)
