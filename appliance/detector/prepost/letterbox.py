"""Letterbox (aspect-preserving resize + centred padding) or stretch, and the exact inverse for boxes.

The inverse uses the scale actually applied on each axis (``new_w / w``), not the nominal ratio, so the frame's
edges map back onto themselves even when rounding changed the resized size (1×4000 frames and the like).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class Letterbox:
    """Where the frame landed in the network input: ``x_net = x_frame * scale_x + pad_x``."""

    frame_w: int
    frame_h: int
    new_w: int
    new_h: int
    pad_x: int
    pad_y: int

    @property
    def scale_x(self) -> float:
        return self.new_w / self.frame_w

    @property
    def scale_y(self) -> float:
        return self.new_h / self.frame_h

    def as_array(self) -> np.ndarray:
        """Six float32 numbers: frame_w, frame_h, new_w, new_h, pad_x, pad_y (what postprocess receives)."""
        return np.array([self.frame_w, self.frame_h, self.new_w, self.new_h, self.pad_x, self.pad_y],
                        dtype=np.float32)

    @classmethod
    def from_array(cls, a: np.ndarray) -> "Letterbox":
        v = [int(round(float(x))) for x in np.asarray(a, dtype=np.float64).reshape(-1)]
        if len(v) != 6 or v[0] <= 0 or v[1] <= 0 or v[2] <= 0 or v[3] <= 0:
            raise ValueError(f"letterbox needs 6 numbers with positive sizes, got {v}")
        return cls(*v)


def plan(frame_w: int, frame_h: int, net_w: int, net_h: int, mode: str = "letterbox") -> Letterbox:
    """Where a frame_w×frame_h frame goes in a net_w×net_h input."""
    if mode == "stretch":
        return Letterbox(frame_w, frame_h, net_w, net_h, 0, 0)
    r = min(net_w / frame_w, net_h / frame_h)
    new_w = min(net_w, max(1, int(round(frame_w * r))))
    new_h = min(net_h, max(1, int(round(frame_h * r))))
    return Letterbox(frame_w, frame_h, new_w, new_h, (net_w - new_w) // 2, (net_h - new_h) // 2)


def apply(image: np.ndarray, net_w: int, net_h: int, pad_value: int = 114, mode: str = "letterbox",
          out: np.ndarray | None = None) -> tuple[np.ndarray, Letterbox]:
    """Resize H×W×3 ``image`` into a net_h×net_w×3 canvas (``out`` is reused when given)."""
    h, w = image.shape[:2]
    lb = plan(w, h, net_w, net_h, mode)
    canvas = out if out is not None else np.empty((net_h, net_w, image.shape[2]), dtype=image.dtype)
    if (lb.new_w, lb.new_h) != (net_w, net_h):
        canvas[...] = pad_value
    resized = image if (lb.new_w, lb.new_h) == (w, h) else cv2.resize(
        image, (lb.new_w, lb.new_h), interpolation=cv2.INTER_LINEAR)
    canvas[lb.pad_y:lb.pad_y + lb.new_h, lb.pad_x:lb.pad_x + lb.new_w] = resized
    return canvas, lb


def boxes_to_frame(boxes: np.ndarray, lb: Letterbox, clip: bool = True) -> np.ndarray:
    """Map [K,4] xyxy boxes from network-input pixels back to frame pixels (float32), clipped to the frame."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    out = np.empty_like(b)
    out[:, 0::2] = (b[:, 0::2] - lb.pad_x) * (lb.frame_w / lb.new_w)
    out[:, 1::2] = (b[:, 1::2] - lb.pad_y) * (lb.frame_h / lb.new_h)
    if clip:
        np.clip(out[:, 0::2], 0, lb.frame_w, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, lb.frame_h, out=out[:, 1::2])
    return out.astype(np.float32)


def boxes_to_net(boxes: np.ndarray, lb: Letterbox) -> np.ndarray:
    """Forward map (frame → network pixels), the inverse of :func:`boxes_to_frame`; used by round-trip checks."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    out = np.empty_like(b)
    out[:, 0::2] = b[:, 0::2] * lb.scale_x + lb.pad_x
    out[:, 1::2] = b[:, 1::2] * lb.scale_y + lb.pad_y
    return out
