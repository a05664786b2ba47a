"""Cameras configured without ``width``/``height`` whose source could not tell its size at start (a camera offline,
a file not there yet): no ring can be made for them, so they wait (state ``waiting``, reason
``size unknown until the source answers``) while the others run. A thread asks each source again on the camera's
``backoff`` schedule (``appliance.capture.probe``); a camera whose source answered is handed to the main loop,
which starts it as a reload that adds it would (``reloader.start_camera``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appliance.backoff import Backoff
from appliance.capture.config import CameraConfig
from appliance.capture.probe import SizeUnknown, probe_size, sized
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.messages import CameraStatus, epoch_ms, iso_utc_ms

if TYPE_CHECKING:  # annotations only: the publisher module loads paho
    from appliance.mqtt.publisher import MqttPublisher

log = logging.getLogger(__name__)
REASON = "size unknown until the source answers"
Waiting = tuple[CameraConfig, SizeUnknown]  # a camera without a size, and why its source could not tell it


@dataclass
class _Waiting:
    camera: CameraConfig
    why: str  # what the source said last
    since: float  # epoch seconds it started waiting
    backoff: Backoff
    due: float  # monotonic time of the next look
    published: bool = False


class LateCameras:
    """The cameras waiting for their size. ``start`` (once the appliance runs) reports them and begins looking;
    ``answered`` (the main loop) takes those now sized; ``replace`` (a reload) sets which cameras wait."""

    def __init__(self, waiting: Sequence[Waiting] = (),
                 probe: Callable[[CameraConfig], tuple[int, int]] = probe_size,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._probe, self._clock = probe, clock
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiting] = {}
        self._answered: dict[str, CameraConfig] = {}
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._publisher: MqttPublisher | None = None
        self._metrics: ApplianceMetrics | None = None
        self.replace(waiting)

    def start(self, publisher: MqttPublisher | None, metrics: ApplianceMetrics) -> None:
        self._publisher, self._metrics = publisher, metrics
        self._thread = threading.Thread(target=self._run, name="late-cameras", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)

    def replace(self, waiting: Sequence[Waiting]) -> None:
        """The cameras that wait from now on (a reload's): one already waiting with the same settings keeps its
        ``since`` and schedule; one no longer waiting is dropped, and its retained status cleared."""
        with self._lock:
            kept = {camera.id: self._waiting.get(camera.id) for camera, _ in waiting}
            gone = [camera_id for camera_id in self._waiting if camera_id not in kept]
            self._waiting = {camera.id: (was if was is not None and was.camera == camera else _Waiting(
                camera, exc.reason, time.time(), Backoff(camera.backoff), self._clock()))
                for (camera, exc), was in zip(waiting, kept.values())}
            self._answered = {}
        for camera_id in gone:
            if self._publisher is not None:
                self._publisher.clear_camera(camera_id)
        self._wake.set()

    def answered(self) -> list[CameraConfig]:
        """The cameras whose source told its size since the last call, each with that size."""
        with self._lock:
            ready, self._answered = list(self._answered.values()), {}
        return ready

    def readings(self) -> dict[str, dict[str, Any]]:
        """The waiting cameras as the health summary lists them (``appliance status``, /healthz, MQTT health)."""
        with self._lock:
            return {w.camera.id: {"state": "waiting", "waiting_for": f"{REASON} ({w.why})",
                                  "waiting_since": iso_utc_ms(epoch_ms(w.since))} for w in self._waiting.values()}

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._report()
            with self._lock:
                due = [w for w in self._waiting.values() if w.due <= self._clock()]
            for waiting in due:
                self._look(waiting)
            with self._lock:
                next_due = min((w.due for w in self._waiting.values()), default=None)
            self._wake.wait(None if next_due is None else max(0.05, next_due - self._clock()))
            self._wake.clear()

    def _look(self, waiting: _Waiting) -> None:
        """Ask the source again (outside the lock: an RTSP answer can take seconds); a reload meanwhile wins."""
        try:
            camera, why = sized(waiting.camera, self._probe), ""
        except SizeUnknown as exc:
            camera, why = None, exc.reason
        with self._lock:
            if self._waiting.get(waiting.camera.id) is not waiting:
                return
            if camera is None:
                waiting.why, waiting.due = why, self._clock() + waiting.backoff.next_delay()
                return
            del self._waiting[camera.id]
            self._answered[camera.id] = camera
        log.info("camera %r: its source answered (%dx%d); starting it", camera.id, camera.width, camera.height)

    def _report(self) -> None:
        """Each camera that began waiting: its retained MQTT status and the waiting gauge, once."""
        with self._lock:
            new = [w for w in self._waiting.values() if not w.published]
            for waiting in new:
                waiting.published = True
        for waiting in new:
            if self._metrics is not None:
                self._metrics.camera_waiting.labels(camera=waiting.camera.id).set(1)
            if self._publisher is not None:
                self._publisher.publish_camera_status(CameraStatus(
                    waiting.camera.id, "waiting", None, f"{REASON} ({waiting.why})", waiting.since))
