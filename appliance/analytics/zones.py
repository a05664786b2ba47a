"""A camera's zones and lines in frame pixels, and the per-frame questions asked of them for all tracks at once:
which zones each anchor point is in, which side of each line it is on and how far, whether a move crossed a
line, and how far a point is from a zone's edge."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from appliance.analytics.config import AnalyticsConfig, Anchor, PointXY
from appliance.analytics.geometry import segments_touch


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


def _edges(polygon: np.ndarray) -> list[tuple[float, float, float, float, float]]:
    """A ring's edges as plain floats: start x, y, direction dx, dy, 1 / length^2 (no edge has length 0)."""
    edges = []
    for (ax, ay), (bx, by) in zip(polygon.tolist(), np.roll(polygon, -1, axis=0).tolist()):
        edges.append((ax, ay, bx - ax, by - ay, 1.0 / ((bx - ax) ** 2 + (by - ay) ** 2)))
    return edges


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
        self._edges = [_edges(p) for p in self.polygons]
        self.zone_hysteresis = [(z.hysteresis.margin, z.hysteresis.frames) for z in config.zones]
        self.lines = []
        for line in config.lines:
            a, b = _pixels((line.a, line.b), line.units, width, height)
            self.lines.append(Line(line.name, a, b, 1 if line.in_side == "right" else -1))
        self.line_names = [ln.name for ln in self.lines]
        self.in_sign = np.array([ln.in_sign for ln in self.lines], dtype=np.int8)
        self._a = np.array([ln.a for ln in self.lines]).reshape(-1, 2)
        self._ab = np.array([ln.b - ln.a for ln in self.lines]).reshape(-1, 2)
        self._ab_len = np.hypot(self._ab[:, 0], self._ab[:, 1])
        self.line_hysteresis = [(ln.hysteresis.margin, ln.hysteresis.frames) for ln in config.lines]

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

    def reach(self, points: np.ndarray) -> np.ndarray:
        """``[N, 2]`` -> ``[N, L]`` signed pixels from each (infinite) line, its sign that of :meth:`sides`."""
        return self._cross(points) / self._ab_len

    def _cross(self, points: np.ndarray) -> np.ndarray:
        return self._ab[:, 0] * (points[:, 1:2] - self._a[:, 1]) - self._ab[:, 1] * (points[:, 0:1] - self._a[:, 0])

    def edge_distance(self, zone: int, point: np.ndarray) -> float:
        """Pixels from ``point`` to the nearest edge of zone ``zone``. One point in plain Python: it is asked
        only of the few tracks whose membership is about to change, where numpy's per-call cost would dominate."""
        x, y = float(point[0]), float(point[1])
        nearest = math.inf
        for ax, ay, dx, dy, inv_length2 in self._edges[zone]:
            t = min(1.0, max(0.0, ((x - ax) * dx + (y - ay) * dy) * inv_length2))
            ex, ey = x - ax - t * dx, y - ay - t * dy
            nearest = min(nearest, ex * ex + ey * ey)
        return math.sqrt(nearest)

    def crossed(self, before: np.ndarray, after: np.ndarray, line: int) -> bool:
        """The one move before->after met line ``line`` (ends included)."""
        ln = self.lines[line]
        return segments_touch((float(before[0]), float(before[1])), (float(after[0]), float(after[1])),
                              (float(ln.a[0]), float(ln.a[1])), (float(ln.b[0]), float(ln.b[1])))
