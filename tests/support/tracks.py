"""Detections written by hand for the analytics tests: a box by where its bottom centre stands, and one frame's
boxes as the tracker's input (10 fps; class ids index CLASSES)."""

from __future__ import annotations

import numpy as np

from appliance.detections import Detections

FPS = 10.0
CLASSES = ["person", "bicycle", "car"]


def box_at(x_bottom: float, y_bottom: float = 300.0, w: float = 40.0, h: float = 100.0) -> list[float]:
    """An x1, y1, x2, y2 box whose bottom centre (the tracker's anchor) is at (x_bottom, y_bottom)."""
    return [x_bottom - w / 2, y_bottom - h, x_bottom + w / 2, y_bottom]


def frame(*boxes: list[float], scores: list[float] | None = None,
          classes: list[int] | None = None) -> Detections:
    """One frame's detections: these boxes, score 0.9 and class 0 unless given."""
    n = len(boxes)
    return Detections.untracked(np.asarray(boxes, dtype=np.float32).reshape(n, 4),
                                np.asarray(scores or [0.9] * n, dtype=np.float32),
                                np.asarray(classes or [0] * n, dtype=np.int64), CLASSES)
