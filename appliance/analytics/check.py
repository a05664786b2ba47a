"""Checks of a camera's ``analytics:`` that need what the section alone does not say: the frame size and the
model's class names. ``appliance check-config`` prefixes each problem's ``path`` with the camera's key path
(``cameras.<i>.analytics``) to find its FILE:LINE."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from appliance.analytics.config import AnalyticsConfig, PointXY


@dataclass(frozen=True)
class AnalyticsProblem:
    camera: str
    name: str                       # the zone's or line's name, or the class name
    path: tuple[str | int, ...]     # key path inside the analytics section, e.g. ("zones", 0, "points", 2)
    reason: str

    def __str__(self) -> str:
        return f"camera {self.camera!r}: {self.name!r}: {self.reason}"


def _outside(point: PointXY, width: int, height: int) -> bool:
    return not (0 <= point[0] <= width and 0 <= point[1] <= height)


def unknown_classes(analytics: AnalyticsConfig, class_names: Sequence[str], camera: str = "",
                    model: str = "the model") -> list[AnalyticsProblem]:
    """The ``classes:`` entries that ``model`` (whose classes are ``class_names``) does not have, in file order."""
    known = set(class_names)
    return [AnalyticsProblem(camera, name, ("classes", name),
                             f"unknown class {name!r} ({model}'s classes: {', '.join(class_names)})")
            for name in analytics.classes or {} if name not in known]


def check_analytics(camera_width: int | None, camera_height: int | None, analytics: AnalyticsConfig,
                    class_names: Sequence[str] | None, camera: str = "") -> list[AnalyticsProblem]:
    """Every problem found, in file order: pixel points outside the ``camera_width`` x ``camera_height`` frame,
    class names the model does not have (unless ``class_names`` is None: the caller weighs those itself). Empty
    when the section fits this camera and model. A size of None (read from the source at start) has no pixel
    points to check: the camera's config allows only normalized ones."""
    problems = unknown_classes(analytics, class_names, camera) if class_names is not None else []
    if camera_width is None or camera_height is None:
        return problems
    frame = f"the {camera_width}x{camera_height} frame"
    for i, zone in enumerate(analytics.zones):
        if zone.units != "pixels":
            continue  # normalized points were checked against 0..1 by the model
        for j, point in enumerate(zone.points):
            if _outside(point, camera_width, camera_height):
                problems.append(AnalyticsProblem(camera, zone.name, ("zones", i, "points", j),
                                                 f"point {j} [{point[0]}, {point[1]}] is outside {frame}"))
    for i, line in enumerate(analytics.lines):
        if line.units != "pixels":
            continue
        for key, point in (("a", line.a), ("b", line.b)):
            if _outside(point, camera_width, camera_height):
                problems.append(AnalyticsProblem(camera, line.name, ("lines", i, key),
                                                 f"point {key} [{point[0]}, {point[1]}] is outside {frame}"))
    return problems
