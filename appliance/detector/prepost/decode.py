"""Decode one image's raw detector head into candidate boxes (network-input pixels, xyxy), scores, class ids.

Two layouts, chosen by the model profile:
- ``rows_with_objectness``: [N, 5+C] rows (box, objectness, C class probs) — YOLOv3/v5/v7; score = obj × cls.
- ``channels_first``: [4+C, N] (box rows, then C class-score rows) — YOLOv8/v11, no objectness.
Each box keeps its best class; with an allow-list the best *allowed* class (a disallowed class that scores
higher does not hide an allowed one). Per-class thresholds apply to that best class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from appliance.detector.prepost.errors import InputRejected

LAYOUTS = ("rows_with_objectness", "channels_first")


@dataclass(frozen=True)
class HeadFormat:
    layout: str
    num_classes: int
    box_format: str = "cxcywh"  # or "xyxy"
    box_units: str = "pixels"   # or "normalized" (0..1 of the network input)
    input_w: int = 0
    input_h: int = 0


def _check(raw: np.ndarray, fmt: HeadFormat) -> np.ndarray:
    a = np.asarray(raw)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2:
        raise InputRejected("head_shape", f"head output must be 2-D (or batch 1), got shape {np.shape(raw)}")
    if fmt.layout == "rows_with_objectness":
        want = 5 + fmt.num_classes
        if a.shape[1] != want:
            raise InputRejected("head_shape", f"rows_with_objectness head needs [N, {want}], got {a.shape}")
    elif fmt.layout == "channels_first":
        want = 4 + fmt.num_classes
        if a.shape[0] != want:
            raise InputRejected("head_shape", f"channels_first head needs [{want}, N], got {a.shape}")
    else:
        raise ValueError(f"unknown head layout {fmt.layout!r}; expected one of {LAYOUTS}")
    return a


def decode(raw: np.ndarray, fmt: HeadFormat, class_thresholds: np.ndarray,
           allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates above their class threshold: boxes [K,4] float32 xyxy, scores [K] float32, class ids [K] int32.

    ``class_thresholds``: [C] score thresholds; ``allowed``: optional class ids to keep.
    """
    a = _check(raw, fmt)
    thr = np.asarray(class_thresholds, dtype=np.float32)
    if thr.shape != (fmt.num_classes,):
        raise ValueError(f"class_thresholds must have {fmt.num_classes} entries, got {thr.shape}")
    floor = float(thr.min()) if allowed is None else float(thr[allowed].min(initial=1.0))
    if fmt.layout == "rows_with_objectness":
        obj = a[:, 4]
        rows = np.flatnonzero(obj > floor)  # class probs are <= 1, so obj bounds every score
        box = a[rows, :4]
        cls_scores = a[rows, 5:] * obj[rows, None]
    else:
        cls_all = a[4:]
        rows = np.flatnonzero(cls_all.max(axis=0) > floor)
        box = a[:4, rows].T
        cls_scores = cls_all[:, rows].T
    if allowed is not None:
        mask = np.zeros(fmt.num_classes, dtype=bool)
        mask[np.asarray(allowed, dtype=np.intp)] = True
        cls_scores = np.where(mask, cls_scores, np.float32(-1))
    ids = cls_scores.argmax(axis=1) if len(rows) else np.zeros(0, dtype=np.intp)
    scores = cls_scores[np.arange(len(rows)), ids]
    keep = scores > thr[ids]
    box, scores, ids = box[keep], scores[keep], ids[keep]
    out = np.empty((len(box), 4), dtype=np.float32)
    if fmt.box_format == "cxcywh":
        half = box[:, 2:4] / 2
        out[:, :2] = box[:, :2] - half
        out[:, 2:] = box[:, :2] + half
    else:
        out[:] = box
    if fmt.box_units == "normalized":
        out *= np.array([fmt.input_w, fmt.input_h, fmt.input_w, fmt.input_h], dtype=np.float32)
    return out, scores.astype(np.float32), ids.astype(np.int32)
