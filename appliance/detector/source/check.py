"""Check a converted darknet ONNX model against OpenCV's own darknet loader on real images."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np


@dataclass(frozen=True)
class HeadDiff:
    """Max abs differences between the ONNX head and OpenCV's, in OpenCV's units (boxes 0..1)."""

    boxes: float
    objectness: float
    class_scores: float  # over the entries OpenCV keeps (it zeroes obj*cls below its own threshold)
    rows: int

    @property
    def worst(self) -> float:
        return max(self.boxes, self.objectness, self.class_scores)


def compare_with_opencv(cfg: Path, weights: Path, onnx_path: Path, images: list[np.ndarray]) -> HeadDiff:
    """Run both on each BGR image (plain resize to the net size, RGB, 1/255) and compare raw heads."""
    import onnxruntime as ort

    net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    _, _, h, w = (d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape)
    db = do = dc = 0.0
    rows = 0
    for img in images:
        blob = cv2.dnn.blobFromImage(img, 1 / 255.0, (w, h), swapRB=True, crop=False)
        net.setInput(blob)
        ref = np.concatenate(net.forward(net.getUnconnectedOutLayersNames()), axis=0)
        out = sess.run(None, {sess.get_inputs()[0].name: blob})[0][0]
        if out.shape != ref.shape:
            raise ValueError(f"head shapes differ: onnx {out.shape} vs opencv {ref.shape}")
        boxes = out[:, :4] / np.array([w, h, w, h], dtype=np.float32)
        scores = out[:, 5:] * out[:, 4:5]
        kept = ref[:, 5:] > 0
        db = max(db, float(np.abs(boxes - ref[:, :4]).max()))
        do = max(do, float(np.abs(out[:, 4] - ref[:, 4]).max()))
        if kept.any():
            dc = max(dc, float(np.abs(scores - ref[:, 5:])[kept].max()))
        rows += out.shape[0]
    return HeadDiff(boxes=db, objectness=do, class_scores=dc, rows=rows)
