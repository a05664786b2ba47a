"""First-boot calibration frames from the device's own cameras, kept in ``<state>/calibration/<model>/``.

The supervisor offers leased frames (``CalibrationCollector.offer(camera_id, frame_bgr, t)``); the collector
keeps a frame only when it spreads the set: at least ``spread_s`` seconds after that camera's last kept frame,
no camera over its share (``count`` split over the cameras seen, or over ``cameras`` when given), and never a
frame identical to one already kept (a frozen camera repeats its image; the calibration reader refuses
repeated frames). It stops at ``count``, counting what a previous run kept, so a restart resumes rather than
starting over. Each frame is a JPEG written durably (temp file, fsync, rename), so the folder never holds a
partial image. An int8 profile with ``calibration.device_frames: N`` reads them (appliance.detector.calibration.frames);
their hash is in the engine fingerprint, so the set growing means a rebuild at the next start.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import numpy as np

from appliance.detector.calibration.frames import device_frames_dir
from appliance.durable import write_file_durably

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class CalibrationCollector:
    """Keeps up to ``count`` camera frames for ``model``'s calibration, spread over cameras and time."""

    def __init__(self, state_dir: Path, model: str, count: int, spread_s: float, cameras: int | None = None,
                 jpeg_quality: int = 95) -> None:
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        if spread_s < 0:
            raise ValueError(f"spread_s must not be negative, got {spread_s}")
        if cameras is not None and cameras < 1:
            raise ValueError(f"cameras must be at least 1, got {cameras}")
        self.folder = device_frames_dir(state_dir, model)
        self.count, self.spread_s, self.cameras, self.quality = count, spread_s, cameras, jpeg_quality
        self._last_t: dict[str, float] = {}
        self._per_camera: dict[str, int] = {}
        self._digests: set[bytes] = set()
        self._kept = len(self._existing())

    def _existing(self) -> list[Path]:
        return sorted(self.folder.glob("*.jpg")) if self.folder.is_dir() else []

    @property
    def kept(self) -> int:
        """Frames in the folder (this run's and earlier runs')."""
        return self._kept

    @property
    def done(self) -> bool:
        """True once ``count`` frames are kept: the caller can stop offering."""
        return self._kept >= self.count

    def _share(self) -> int:
        cameras = max(self.cameras or 1, len(self._per_camera))
        return math.ceil(self.count / cameras)

    def offer(self, camera_id: str, frame_bgr: np.ndarray, t: float) -> bool:
        """Keep ``frame_bgr`` (H x W x 3 uint8, BGR) if it spreads the set; ``t`` is the caller's monotonic
        seconds. Returns whether the frame was written. The caller may reuse the buffer after this returns."""
        if frame_bgr.ndim != 3 or frame_bgr.shape[2] != 3 or frame_bgr.dtype != np.uint8:
            raise ValueError(f"calibration frames are H x W x 3 uint8 BGR, got {frame_bgr.shape} {frame_bgr.dtype}")
        self._per_camera.setdefault(camera_id, 0)
        if self.done or self._per_camera[camera_id] >= self._share():
            return False
        last = self._last_t.get(camera_id)
        if last is not None and t - last < self.spread_s:
            return False
        digest = hashlib.sha256(np.ascontiguousarray(frame_bgr).tobytes()).digest()
        if digest in self._digests:
            return False
        import cv2

        ok, jpeg = cv2.imencode(".jpg", frame_bgr, [cv2.IMWRITE_JPEG_QUALITY, self.quality])
        if not ok:
            raise ValueError(f"camera {camera_id}: the frame cannot be encoded as JPEG")
        self.folder.mkdir(parents=True, exist_ok=True)
        index = self._kept
        while (path := self.folder / f"{_UNSAFE.sub('_', camera_id)}-{index:04d}.jpg").exists():
            index += 1  # a frame removed by hand leaves a gap in the numbering: never overwrite a kept frame
        write_file_durably(path, jpeg.tobytes())
        self._digests.add(digest)
        self._last_t[camera_id] = t
        self._per_camera[camera_id] += 1
        self._kept += 1
        return True
