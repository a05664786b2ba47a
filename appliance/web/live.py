"""The live picture: the newest frame of each watched camera with its detections, copied only while a viewer
watches (a request in the last ``linger_s``) and at most ``fps`` times a second; JPEG-encoded per request. With
no viewer the frame path asks one dictionary lookup per frame and copies nothing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from appliance.mqtt.messages import DetectionsMessage


@dataclass(frozen=True)
class LiveFrame:
    pixels: np.ndarray   # HxWx3, a copy of the ring's frame
    pixel_format: str    # "bgr" or "rgb"
    seq: int
    capture_time: float  # UTC seconds
    detections: list[dict]  # box (xyxy frame pixels), class_name, score, track_id


class LiveFrames:
    """Thread-safe: the frame path calls :meth:`wants` and :meth:`offer`, the web thread the rest."""

    def __init__(self, *, fps: float = 5.0, linger_s: float = 3.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._period, self._linger_s, self._clock = 1.0 / fps, linger_s, clock
        self._watched: dict[str, float] = {}   # camera -> copy frames until this time
        self._copied: dict[str, float] = {}    # camera -> when the last frame was taken
        self._latest: dict[str, LiveFrame] = {}
        self._lock = threading.Lock()

    def watch(self, camera_id: str) -> None:
        """A viewer asked for the camera's picture: keep copying its frames for a while."""
        self._watched[camera_id] = self._clock() + self._linger_s

    def wants(self, camera_id: str) -> bool:
        """Whether the frame path should copy this frame of the camera (watched, and due)."""
        until = self._watched.get(camera_id)
        if until is None:
            return False
        now = self._clock()
        if now > until:
            with self._lock:
                self._watched.pop(camera_id, None)
                self._latest.pop(camera_id, None)  # no stale picture for the next viewer
            return False
        if now - self._copied.get(camera_id, -np.inf) < self._period:
            return False
        self._copied[camera_id] = now
        return True

    def offer(self, camera_id: str, pixels: np.ndarray, pixel_format: str, message: DetectionsMessage) -> None:
        rows = [{"box": [round(v, 1) for v in d.box], "class_name": d.class_name, "score": round(d.score, 3),
                 "track_id": d.track_id} for d in message.detections]
        frame = LiveFrame(pixels, pixel_format, message.seq, message.capture_time, rows)
        with self._lock:
            if camera_id in self._watched:
                self._latest[camera_id] = frame

    def latest(self, camera_id: str) -> LiveFrame | None:
        with self._lock:
            return self._latest.get(camera_id)


def encode(frame: LiveFrame, max_width: int, quality: int = 75) -> tuple[bytes, str]:
    """(JPEG of the frame scaled to at most ``max_width``, its detections as JSON in frame pixels)."""
    image = frame.pixels if frame.pixel_format == "bgr" else cv2.cvtColor(frame.pixels, cv2.COLOR_RGB2BGR)
    height, width = image.shape[:2]
    if width > max_width:
        image = cv2.resize(image, (max_width, round(height * max_width / width)), interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("OpenCV could not encode the live frame")
    meta = {"seq": frame.seq, "capture_time": frame.capture_time, "width": width, "height": height,
            "detections": frame.detections}
    return data.tobytes(), json.dumps(meta)
