"""An independent reference detector pipeline built on OpenCV's own darknet loader.

Written straight from the darknet/OpenCV conventions, sharing no code with ``appliance.detector.prepost``: its own
letterbox, ``cv2.dnn.blobFromImage``, ``cv2.dnn.readNetFromDarknet``, a row-by-row decode and
``cv2.dnn.NMSBoxesBatched``. OpenCV's YOLO outputs already hold objectness × class probability.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np


@dataclass
class RefDetection:
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in frame pixels
    score: float
    class_id: int


class OpenCVReference:
    def __init__(self, cfg: Path, weights: Path, size: int = 416, pad: int = 127) -> None:
        self.net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
        self.size, self.pad = size, pad

    def letterbox(self, bgr: np.ndarray) -> tuple[np.ndarray, float, float, int, int]:
        h, w = bgr.shape[:2]
        ratio = min(self.size / w, self.size / h)
        nw, nh = max(1, min(self.size, round(w * ratio))), max(1, min(self.size, round(h * ratio)))
        left, top = (self.size - nw) // 2, (self.size - nh) // 2
        canvas = np.full((self.size, self.size, 3), self.pad, dtype=np.uint8)
        canvas[top:top + nh, left:left + nw] = cv2.resize(bgr, (nw, nh), interpolation=cv2.INTER_LINEAR)
        return canvas, nw / w, nh / h, left, top

    def raw(self, canvas_bgr: np.ndarray) -> np.ndarray:
        """[2535, 85] OpenCV head: normalized cx,cy,w,h, objectness, obj×cls (zeroed below OpenCV's cut)."""
        blob = cv2.dnn.blobFromImage(canvas_bgr, 1 / 255.0, (self.size, self.size), swapRB=True, crop=False)
        self.net.setInput(blob)
        return np.concatenate(self.net.forward(self.net.getUnconnectedOutLayersNames()), axis=0)

    def detect(self, bgr: np.ndarray, score: float = 0.25, iou: float = 0.45,
               max_det: int = 100) -> list[RefDetection]:
        h, w = bgr.shape[:2]
        canvas, sx, sy, left, top = self.letterbox(bgr)
        rects, scores, ids = [], [], []
        for row in self.raw(canvas):
            class_scores = row[5:]
            cid = int(np.argmax(class_scores))
            conf = float(class_scores[cid])
            if conf > score:
                cx, cy, bw, bh = (float(v) * self.size for v in row[:4])
                rects.append((cx - bw / 2, cy - bh / 2, bw, bh))
                scores.append(conf)
                ids.append(cid)
        if not rects:
            return []
        keep = cv2.dnn.NMSBoxesBatched(rects, scores, ids, score, iou)
        out = []
        for k in np.asarray(keep).reshape(-1):
            x, y, bw, bh = rects[k]
            x1 = min(max((x - left) / sx, 0.0), w)
            x2 = min(max((x + bw - left) / sx, 0.0), w)
            y1 = min(max((y - top) / sy, 0.0), h)
            y2 = min(max((y + bh - top) / sy, 0.0), h)
            out.append(RefDetection((x1, y1, x2, y2), scores[k], ids[k]))
        out.sort(key=lambda d: -d.score)
        return out[:max_det]


def assert_same_detections(ref: list[RefDetection], boxes: np.ndarray, scores: np.ndarray,
                           class_ids: np.ndarray, box_tol: float = 1.0, score_tol: float = 1e-3) -> None:
    """Same number, and each reference detection has a partner of the same class within the tolerances."""
    assert len(boxes) == len(ref), f"{len(boxes)} detections, reference has {len(ref)}"
    unused = set(range(len(boxes)))
    for d in ref:
        candidates = [i for i in unused if int(class_ids[i]) == d.class_id]
        assert candidates, f"no detection of class {d.class_id} left for reference {d}"
        best = min(candidates, key=lambda i: float(np.abs(boxes[i] - np.array(d.box)).max()))
        err = float(np.abs(boxes[best] - np.array(d.box)).max())
        assert err <= box_tol, f"box {boxes[best]} vs reference {d.box}: {err:.3f} px"
        assert abs(float(scores[best]) - d.score) <= score_tol, f"score {scores[best]} vs reference {d.score}"
        unused.remove(best)


def write_v8_adapter(src: Path, dst: Path) -> None:
    """Append a YOLOv8-style adapter to the converted detector: [N, 2535, 85] → [N, 84, 2535] (box rows, then
    obj×cls rows; no objectness row), so the channels_first decode runs on a real network."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    old = g.output[0].name
    for node in g.node:  # rename the original output so the adapter's result can take its name
        node.output[:] = [o if o != old else "v3_head" for o in node.output]

    def const(name: str, values: list[int]) -> str:
        g.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    axes = const("v8_axes", [2])
    g.node.extend([
        helper.make_node("Slice", ["v3_head", const("v8_0", [0]), const("v8_4", [4]), axes], ["v8_box"]),
        helper.make_node("Slice", ["v3_head", const("v8_4b", [4]), const("v8_5", [5]), axes], ["v8_obj"]),
        helper.make_node("Slice", ["v3_head", const("v8_5b", [5]), const("v8_end", [1 << 30]), axes], ["v8_cls"]),
        helper.make_node("Mul", ["v8_cls", "v8_obj"], ["v8_scores"]),
        helper.make_node("Concat", ["v8_box", "v8_scores"], ["v8_rows"], axis=2),
        helper.make_node("Transpose", ["v8_rows"], [old], perm=[0, 2, 1]),
    ])
    g.output[0].type.tensor_type.shape.dim[1].dim_param = "channels"
    g.output[0].type.tensor_type.shape.dim[2].dim_param = "boxes"
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
