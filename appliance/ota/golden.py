"""Golden frames: expected detections on known images, compared within a tolerance.

Two sets are checked before a switch: the bundle's own (``manifest.golden``) and an optional device-local set,
a directory with ``golden.json`` ({"frames": [{"file", "expected": [...]}], "tolerance": {...}}) and the
images, for what this line's cameras actually see.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import ValidationError

from appliance.config import StrictModel
from appliance.ota.errors import OtaError
from appliance.ota.manifest import ExpectedDetection, GoldenFrame, GoldenTolerance


class GoldenSetError(OtaError):
    """The device-local golden set is unreadable or invalid."""


class DeviceGoldenSet(StrictModel):
    frames: list[GoldenFrame]
    tolerance: GoldenTolerance = GoldenTolerance()


def load_device_set(directory: Path) -> DeviceGoldenSet:
    path = Path(directory) / "golden.json"
    try:
        data = DeviceGoldenSet.model_validate(json.loads(path.read_text()))
    except OSError as exc:
        raise GoldenSetError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:  # JSONDecodeError and ValidationError
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()) \
            if isinstance(exc, ValidationError) else str(exc)
        raise GoldenSetError(f"{path}: {msg}") from None
    for frame in data.frames:
        if not (Path(directory) / frame.file).is_file():
            raise GoldenSetError(f"{path}: frame file {frame.file} not found")
    return data


def read_image(path: Path) -> np.ndarray:
    import cv2

    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise GoldenSetError(f"{path}: not a readable image")
    return image


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@dataclass(frozen=True)
class FrameResult:
    file: str
    matched: int
    missing: list[str]
    extra: list[str]
    passed: bool

    def summary(self) -> str:
        return (f"{self.file}: {self.matched} matched, missing {self.missing or 'none'}, "
                f"unexpected {self.extra or 'none'}")


def compare(file: str, expected: list[ExpectedDetection], boxes: np.ndarray, scores: np.ndarray,
            class_ids: np.ndarray, class_names: Sequence[str], tol: GoldenTolerance) -> FrameResult:
    """Greedy matching, best IoU first, same class, score within tolerance."""
    got = [(class_names[int(c)] if 0 <= int(c) < len(class_names) else str(int(c)), float(s), tuple(map(float, b)))
           for b, s, c in zip(boxes, scores, class_ids)]
    used: set[int] = set()
    missing: list[str] = []
    for exp in expected:
        best, best_iou = None, tol.min_iou
        for i, (name, score, box) in enumerate(got):
            if i in used or name != exp.class_name or abs(score - exp.score) > tol.score_abs:
                continue
            value = iou(box, exp.box)
            if value >= best_iou:
                best, best_iou = i, value
        if best is None:
            missing.append(f"{exp.class_name}@{exp.score:.2f}")
        else:
            used.add(best)
    extra = [f"{got[i][0]}@{got[i][1]:.2f}" for i in range(len(got)) if i not in used]
    passed = len(missing) <= tol.max_missing and len(extra) <= tol.max_extra
    return FrameResult(file, len(used), missing, extra, passed)
