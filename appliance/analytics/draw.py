"""What the appliance draws on a picture: detections with their track ids and classes, zones, and lines with
their counts. One function, used by the snapshots and the annotated restream, so both show the same thing."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from appliance.detections import Detections

BOX_BGR = (0, 255, 0)        # every detection of the frame
EVENT_BGR = (0, 0, 255)      # the objects whose events a snapshot proves
ZONE_BGR = (255, 160, 0)
LINE_BGR = (0, 200, 255)
LINE_PX = 2


@dataclass(frozen=True)
class DrawnBox:
    """One box drawn on a picture: frame pixels clamped to the frame and rounded as the MQTT messages do."""

    box: tuple[float, float, float, float]
    track_id: int | None
    class_name: str
    score: float


@dataclass(frozen=True)
class DrawnLine:
    name: str
    a: tuple[float, float]  # frame pixels
    b: tuple[float, float]
    counts: Mapping[str, int] = field(default_factory=dict)  # "in", "out"


@dataclass(frozen=True)
class DrawnZone:
    name: str
    points: Sequence[tuple[float, float]]  # frame pixels
    current: int | None = None  # tracks inside now


@dataclass(frozen=True)
class Scene:
    """Everything drawn on one frame, in frame pixels."""

    boxes: Sequence[DrawnBox] = ()
    zones: Sequence[DrawnZone] = ()
    lines: Sequence[DrawnLine] = ()


def clamp_box(box: Sequence[float], width: int, height: int) -> tuple[float, float, float, float]:
    """Like the detections payload's ``box``: clamped to the frame, rounded to 0.01 px."""
    def c(v: float, hi: int) -> float:
        return round(min(max(float(v), 0.0), float(hi)), 2)
    return (c(box[0], width), c(box[1], height), c(box[2], width), c(box[3], height))


def boxes_of(detections: Detections, width: int, height: int) -> list[DrawnBox]:
    """A frame's detections as drawn: each box clamped to the ``width`` x ``height`` frame."""
    return [DrawnBox(clamp_box(d.box, width, height), d.track_id, d.class_name, d.score) for d in detections]


def _label(image: np.ndarray, text: str, at: tuple[int, int], color: tuple[int, int, int]) -> None:
    cv2.putText(image, text, at, cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(image, text, at, cv2.FONT_HERSHEY_SIMPLEX, 0.45, color, 1, cv2.LINE_AA)


def draw_scene(image: np.ndarray, scene: Scene, *, scale: float = 1.0,
               highlight: Collection[int] = frozenset()) -> np.ndarray:
    """``scene`` drawn on ``image`` (BGR, changed in place and returned) whose size is the frame's times
    ``scale``; the tracks in ``highlight`` in EVENT_BGR and drawn last, so a neighbour's box never hides them."""
    def px(x: float, y: float) -> tuple[int, int]:
        return round(x * scale), round(y * scale)

    for zone in scene.zones:
        points = np.array([px(x, y) for x, y in zone.points], np.int32)
        cv2.polylines(image, [points], True, ZONE_BGR, LINE_PX, cv2.LINE_AA)
        text = zone.name if zone.current is None else f"{zone.name}: {zone.current}"
        _label(image, text, (int(points[:, 0].min()) + 4, int(points[:, 1].min()) + 16), ZONE_BGR)
    for line in scene.lines:
        a, b = px(*line.a), px(*line.b)
        cv2.line(image, a, b, LINE_BGR, LINE_PX, cv2.LINE_AA)
        counts = " ".join(f"{k} {v}" for k, v in line.counts.items())
        _label(image, f"{line.name} {counts}".strip(), (min(a[0], b[0]) + 4, min(a[1], b[1]) - 6), LINE_BGR)
    for drawn in sorted(scene.boxes, key=lambda d: d.track_id in highlight):
        x1, y1, x2, y2 = (round(v * scale) for v in drawn.box)
        color = EVENT_BGR if drawn.track_id in highlight else BOX_BGR
        cv2.rectangle(image, (x1, y1), (x2, y2), color, LINE_PX)
        label = f"#{drawn.track_id} {drawn.class_name}" if drawn.track_id is not None else drawn.class_name
        cv2.putText(image, label, (x1 + 3, y2 - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.4, color, 1, cv2.LINE_AA)
    return image
