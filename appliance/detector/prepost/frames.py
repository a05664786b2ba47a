"""Turn what a camera or a tool hands us into an H×W×3 uint8 image, or refuse it with a named reason.

Accepted, as documented in docs/models.md:
- H×W×3 uint8 in the camera's channel order (BGR or RGB): used as is, no copy.
- H×W and H×W×1 uint8 (grayscale): replicated to 3 channels.
- H×W×4 uint8 (BGRA/RGBA): alpha dropped.
- Encoded JPEG/PNG bytes (1-D uint8): decoded with OpenCV (result is BGR).
Refused: empty, rank other than 2/3, other channel counts, non-uint8 (16-bit is refused rather than guessed
at: a 12-bit sensor and a 16-bit one need different scaling), larger than the limits, undecodable bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from appliance.detector.prepost.errors import InputRejected


@dataclass(frozen=True)
class FrameLimits:
    max_width: int = 8192
    max_height: int = 8192
    max_encoded_bytes: int = 32 << 20


def check_frame(frame: np.ndarray, limits: FrameLimits) -> np.ndarray:
    """Return an H×W×3 uint8 view/copy of ``frame`` in the same channel order; raise InputRejected."""
    if not isinstance(frame, np.ndarray):
        raise InputRejected("type", f"frame must be a numpy array, got {type(frame).__name__}")
    if frame.dtype != np.uint8:
        raise InputRejected("dtype", f"frame dtype must be uint8, got {frame.dtype} (convert 16-bit frames to 8-bit)")
    if frame.ndim not in (2, 3):
        raise InputRejected("rank", f"frame must be H×W or H×W×C, got shape {frame.shape}")
    if frame.size == 0:
        raise InputRejected("empty", f"frame is empty (shape {frame.shape})")
    h, w = frame.shape[:2]
    if w > limits.max_width or h > limits.max_height:
        raise InputRejected(
            "too_large", f"frame {w}×{h} exceeds the limit {limits.max_width}×{limits.max_height}")
    channels = 1 if frame.ndim == 2 else frame.shape[2]
    if channels == 3:
        return frame
    if channels == 1:
        return cv2.cvtColor(frame.reshape(h, w), cv2.COLOR_GRAY2BGR)
    if channels == 4:
        return np.ascontiguousarray(frame[:, :, :3])
    raise InputRejected("channels", f"frame must have 1, 3 or 4 channels, got {channels}")


def decode_image(data: np.ndarray | bytes, limits: FrameLimits) -> np.ndarray:
    """Decode JPEG/PNG bytes to H×W×3 uint8 BGR; raise InputRejected."""
    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else data
    if buf.dtype != np.uint8 or buf.ndim != 1:
        raise InputRejected("rank", f"encoded image must be 1-D uint8 bytes, got {buf.dtype} shape {buf.shape}")
    if buf.size == 0:
        raise InputRejected("empty", "encoded image is empty")
    if buf.size > limits.max_encoded_bytes:
        raise InputRejected(
            "too_large", f"encoded image is {buf.size} bytes, over the limit {limits.max_encoded_bytes}")
    image = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    if image is None:
        raise InputRejected("undecodable", f"encoded image ({buf.size} bytes) is not a decodable JPEG/PNG")
    return check_frame(image, limits)
