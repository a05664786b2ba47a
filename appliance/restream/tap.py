"""The frame path's side of the restream: which cameras a client watches (one dictionary lookup per frame),
and a worker that draws the annotated picture and sends frames to the RTSP server, off the result thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import cv2
import numpy as np

from appliance.analytics.draw import DrawnLine, DrawnZone, Scene, boxes_of, draw_scene
from appliance.mqtt.messages import DetectionsMessage
from appliance.restream.server import RestreamServer

log = logging.getLogger(__name__)
ENCODED = frozenset({"raw", "annotated"})  # the kinds made from frames ("passthrough" comes from the camera)


class OverlaySource(Protocol):
    """appliance.pipeline.eventstage.CameraAnalytics: the camera's zones and lines with their counts now."""

    def overlay(self) -> tuple[Sequence[DrawnZone], Sequence[DrawnLine]]: ...


def scene_of(message: DetectionsMessage, overlay: OverlaySource | None) -> Scene:
    zones, lines = overlay.overlay() if overlay is not None else ((), ())
    return Scene(boxes_of(message.detections, message.image_width, message.image_height), zones, lines)


class Restream:
    """Frames of watched cameras go to the server: as they are for ``/<camera>``, drawn on for
    ``/<camera>/annotated``. Only the newest frame per camera waits; an older one is replaced, never queued."""

    def __init__(self, server: RestreamServer, overlays: Mapping[str, OverlaySource]) -> None:
        self.server, self._overlays = server, overlays
        self._pending: dict[str, tuple[np.ndarray, str, DetectionsMessage]] = {}
        self._wake = threading.Condition()
        self._running = True
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="restream", daemon=True)
        self._thread.start()

    def wants(self, camera_id: str) -> bool:
        return not ENCODED.isdisjoint(self.server.watched.get(camera_id, ()))

    def page_video(self, camera_id: str) -> tuple[str | None, str]:
        """The page's video source (appliance.web.video.VideoSource): the annotated stream, or why not."""
        if camera_id not in self.server.cameras:
            return None, f"no camera {camera_id!r}"
        if not self.server.config.annotated:
            return None, "the annotated stream is off (restream.annotated)"
        return self.server.local_url(camera_id), ""

    def readings(self) -> dict[str, Any]:
        """/healthz's ``restream``: the encoder, and per camera each mount's pipeline while it has a client
        ("passthrough": the camera's own packets; an encoder's name: encoded), null while it has none."""
        server, watched = self.server, self.server.watched
        cameras: dict[str, dict[str, str | None]] = {}
        for camera in server.cameras:
            kinds = watched.get(camera, frozenset())
            mounts: dict[str, str | None] = {f"/{camera}": "passthrough" if "passthrough" in kinds
                                             else server.encoder if "raw" in kinds else None}
            if server.config.annotated:
                mounts[f"/{camera}/annotated"] = server.encoder if "annotated" in kinds else None
            cameras[camera] = mounts
        return {"port": server.port, "encoder": server.encoder, "encoders_started": server.encoders_started,
                "cameras": cameras}

    def offer(self, camera_id: str, pixels: np.ndarray, pixel_format: str, message: DetectionsMessage) -> None:
        if not self.wants(camera_id):
            return
        with self._wake:
            self._pending[camera_id] = (pixels, pixel_format, message)
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._running and not self._pending:
                    self._wake.wait()
                if not self._running:
                    return
                pending, self._pending = self._pending, {}
            for camera, (pixels, pixel_format, message) in pending.items():
                try:
                    self._send(camera, pixels, pixel_format, message)
                except OSError as exc:  # the server went away; its supervisor side logs why
                    log.warning("restream: camera %s: frame not sent: %s", camera, exc)

    def _send(self, camera: str, pixels: np.ndarray, pixel_format: str, message: DetectionsMessage) -> None:
        kinds = self.server.watched.get(camera, frozenset())
        height, width = pixels.shape[:2]
        if "raw" in kinds:
            self.server.send(camera, "raw", width, height, pixel_format, np.ascontiguousarray(pixels).data)
        if "annotated" in kinds:
            image = cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR) if pixel_format == "rgb" else pixels.copy()
            draw_scene(image, scene_of(message, self._overlays.get(camera)))
            self.server.send(camera, "annotated", width, height, "bgr", image.data)
        self.sent += 1

    def stop(self) -> None:
        with self._wake:
            self._running = False
            self._wake.notify()
        self._thread.join(5.0)
        self.server.stop()
