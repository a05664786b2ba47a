"""Turn one finished ensemble request into the MQTT detections message."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from appliance.detections import Detections
from appliance.mqtt.messages import DetectionsMessage, ModelInfo


def detections_from_outputs(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray,
                            class_names: Sequence[str]) -> Detections:
    """BOXES [K,4] (x1,y1,x2,y2 frame pixels), SCORES [K], CLASSES [K] -> untracked Detections, each score
    clamped to [0, 1] (NaN counts as 0)."""
    if not (len(boxes) == len(scores) == len(classes)):
        raise ValueError(f"ensemble outputs disagree on the detection count: boxes {boxes.shape}, "
                         f"scores {scores.shape}, classes {classes.shape}")
    scores = np.asarray(scores, dtype=np.float32)
    scores = np.where(scores > 0.0, scores, np.float32(0.0))
    scores = np.where(scores < 1.0, scores, np.float32(1.0))
    return Detections.untracked(boxes, scores, classes, class_names)


def build_message(meta: Any, outputs: Mapping[str, np.ndarray], model: ModelInfo, class_names: Sequence[str],
                  latency_ms: Mapping[str, float]) -> DetectionsMessage:
    """``meta`` is the frame's capture metadata (camera_id, seq, t_utc, width, height)."""
    return DetectionsMessage(
        camera_id=meta.camera_id,
        seq=int(meta.seq),
        capture_time=float(meta.t_utc),
        model=model,
        image_width=int(meta.width),
        image_height=int(meta.height),
        detections=detections_from_outputs(outputs["BOXES"], outputs["SCORES"], outputs["CLASSES"], class_names),
        latency_ms={k: round(max(0.0, v), 3) for k, v in latency_ms.items()},
    )
