"""The whole pre- and post-processing for one frame, configured from a model profile.

``Preprocessor`` and ``Postprocessor`` hold the profile-derived constants so the Triton models and the plain
loop call exactly the same code per frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from appliance.models.profile import ModelProfile
from appliance.processing import decode as _decode
from appliance.processing import letterbox as _lb
from appliance.processing.errors import InputRejected
from appliance.processing.frames import FrameLimits, check_frame, decode_image
from appliance.processing.nms import nms
from appliance.processing.normalize import to_tensor


@dataclass(frozen=True)
class Detections:
    boxes: np.ndarray      # [K,4] float32 xyxy frame pixels
    scores: np.ndarray     # [K] float32
    class_ids: np.ndarray  # [K] int32


class Preprocessor:
    def __init__(self, profile: ModelProfile) -> None:
        i = profile.input
        self.net_w, self.net_h = i.width, i.height
        self.order, self.mode, self.pad = i.channel_order, i.resize, i.pad_value
        self.scale, self.mean, self.std = i.scale, i.mean, i.std
        self.layout, self.dtype = i.layout, i.dtype
        lim = profile.limits
        self.limits = FrameLimits(lim.max_width, lim.max_height, lim.max_encoded_bytes)

    def frame(self, frame: np.ndarray, channel_order: str = "BGR") -> tuple[np.ndarray, _lb.Letterbox]:
        """Raw H×W×C frame → (tensor without batch dim, letterbox); raises InputRejected."""
        if channel_order not in ("BGR", "RGB"):
            raise InputRejected("channel_order", f"channel order must be 'BGR' or 'RGB', got {channel_order!r}")
        image = check_frame(frame, self.limits)
        canvas, lb = _lb.apply(image, self.net_w, self.net_h, self.pad, self.mode)
        tensor = to_tensor(canvas, channel_order, self.order, self.scale, self.mean, self.std, self.layout,
                           self.dtype)
        return tensor, lb

    def encoded(self, data: np.ndarray | bytes) -> tuple[np.ndarray, _lb.Letterbox]:
        """JPEG/PNG bytes → (tensor, letterbox); raises InputRejected."""
        return self.frame(decode_image(data, self.limits), "BGR")


class Postprocessor:
    def __init__(self, profile: ModelProfile) -> None:
        h = profile.head
        self.fmt = _decode.HeadFormat(h.layout, len(profile.classes), h.box_format, h.box_units,
                                      profile.input.width, profile.input.height)
        self.thresholds = np.asarray(profile.class_thresholds(), dtype=np.float32)
        allowed = profile.allowed_ids()
        self.allowed = None if allowed is None else np.asarray(allowed, dtype=np.intp)
        self.iou = profile.thresholds.iou
        self.max_det = profile.thresholds.max_detections

    def __call__(self, raw: np.ndarray, lb: _lb.Letterbox) -> Detections:
        boxes, scores, ids = _decode.decode(raw, self.fmt, self.thresholds, self.allowed)
        keep = nms(boxes, scores, ids, self.iou, self.max_det)
        return Detections(_lb.boxes_to_frame(boxes[keep], lb), scores[keep], ids[keep])
