"""The whole pre- and post-processing for one frame, configured from a model profile.

``Preprocessor`` and ``Postprocessor`` hold the profile-derived constants so the Triton models and the plain
loop call exactly the same code per frame.
"""

from __future__ import annotations

import numpy as np

from appliance.detections import RawDetections
from appliance.detector.prepost import decode as _decode
from appliance.detector.prepost import letterbox as _lb
from appliance.detector.prepost.errors import InputRejected
from appliance.detector.prepost.frames import FrameLimits, check_frame, decode_image
from appliance.detector.prepost.nms import nms
from appliance.detector.prepost.normalize import to_tensor
from appliance.detector.profile import ModelProfile


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

    def canvas(self, frame: np.ndarray, channel_order: str = "BGR") -> tuple[np.ndarray, _lb.Letterbox]:
        """For a detector that normalizes in its graph: the letterboxed H×W×3 uint8 BGR canvas, no float math."""
        if channel_order not in ("BGR", "RGB"):
            raise InputRejected("channel_order", f"channel order must be 'BGR' or 'RGB', got {channel_order!r}")
        image = check_frame(frame, self.limits)
        canvas, lb = _lb.apply(image, self.net_w, self.net_h, self.pad, self.mode)
        return (canvas if channel_order == "BGR" else canvas[:, :, ::-1]), lb

    def encoded_canvas(self, data: np.ndarray | bytes) -> tuple[np.ndarray, _lb.Letterbox]:
        """JPEG/PNG bytes → (letterboxed BGR canvas, letterbox); raises InputRejected."""
        return self.canvas(decode_image(data, self.limits), "BGR")


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

    def __call__(self, raw: np.ndarray, lb: _lb.Letterbox) -> RawDetections:
        boxes, scores, ids = _decode.decode(raw, self.fmt, self.thresholds, self.allowed)
        keep = nms(boxes, scores, ids, self.iou, self.max_det)
        return RawDetections(_lb.boxes_to_frame(boxes[keep], lb), scores[keep], ids[keep])

    def final(self, boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, count: np.ndarray,
              lb: _lb.Letterbox) -> RawDetections:
        """A detector that decodes and runs NMS in its graph (appliance.detector.repository.wrap): its first ``count``
        rows (network pixels, best first) mapped back to the frame and clipped."""
        b, s, c, n = (np.asarray(a) for a in (boxes, scores, class_ids, count))
        b, s, c = (a[0] if a.ndim == want + 1 and a.shape[0] == 1 else a for a, want in ((b, 2), (s, 1), (c, 1)))
        if b.ndim != 2 or b.shape[1] != 4 or s.shape != (len(b),) or c.shape != (len(b),):
            raise InputRejected("head_shape", f"in-graph detections need BOXES [K,4], SCORES [K], CLASSES [K], got "
                                              f"{np.shape(boxes)}, {np.shape(scores)}, {np.shape(class_ids)}")
        if n.size != 1 or not 0 <= int(n.reshape(-1)[0]) <= len(b):
            raise InputRejected("head_shape", f"in-graph detection COUNT must be one number within 0..{len(b)}, "
                                              f"got {n.reshape(-1)[:4].tolist()}")
        k = int(n.reshape(-1)[0])
        return RawDetections(_lb.boxes_to_frame(b[:k], lb), s[:k].astype(np.float32), c[:k].astype(np.int32))
