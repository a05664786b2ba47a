"""Class-aware greedy non-maximum suppression, vectorized over candidates with numpy.

Boxes of different classes never suppress each other: each class is shifted to its own region of the plane
(the usual offset trick), so one pass handles all classes. A box is dropped when its IoU with a higher-scoring
kept box of the same class is *greater than* ``iou_threshold`` (OpenCV's and torchvision's convention).
"""

from __future__ import annotations

import numpy as np


def nms(boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, iou_threshold: float,
        max_detections: int | None = None) -> np.ndarray:
    """Indices of kept boxes (xyxy), best score first, at most ``max_detections``."""
    n = len(scores)
    if n == 0:
        return np.zeros(0, dtype=np.intp)
    b = np.asarray(boxes, dtype=np.float64)
    span = float(max(b[:, 2:].max(), 0.0) - min(b[:, :2].min(), 0.0)) + 1.0
    b = b + (np.asarray(class_ids, dtype=np.float64) * span)[:, None]
    x1, y1, x2, y2 = b.T
    area = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    order = np.argsort(-np.asarray(scores), kind="stable")
    limit = n if max_detections is None else max_detections
    keep: list[int] = []
    while order.size and len(keep) < limit:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        iw = np.clip(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0, None)
        ih = np.clip(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0, None)
        inter = iw * ih
        union = area[i] + area[rest] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.intp)
