"""The frame path: one leased frame into the ensemble the router names, its result out to the sinks.

The scheduler calls ``submit`` from its thread and ``on_result`` from Triton's completion thread, in each camera's
frame order. The route is held from submit to result, so an OTA switch moves traffic per request; everything
else comes in through small protocols, so tests drive it without Triton (docs/supervisor.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from appliance.capture.ring import FrameMeta
from appliance.detector.calibration.collector import CalibrationFeed
from appliance.detector.serving.probe import Fault, fault_from_error
from appliance.detector.serving.router import Route
from appliance.health.rate import RecentRate
from appliance.mqtt.messages import DetectionsMessage, ModelInfo
from appliance.pipeline.eventstage import CameraAnalytics
from appliance.pipeline.results import build_message
from appliance.pipeline.scheduler import Lease
from appliance.pipeline.sink import Frame, Sink, Sinks

log = logging.getLogger(__name__)

OUTPUTS = ["BOXES", "SCORES", "CLASSES"]


class InferenceServer(Protocol):
    """appliance.triton.server.Server: starts one request; its future's result has ``outputs``."""

    def infer_async(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None, *,
                    request_id: str = "", timeout_s: float | None = None,
                    on_inputs_released: Callable[[], None] | None = None) -> Future[Any]: ...


class RouteHolder(Protocol):
    """appliance.detector.serving.router.Router: the route each frame takes, and what came back from it."""

    def acquire(self) -> Route: ...
    def release(self, route: Route, ok: bool, latency_s: float, detections: int = 0) -> None: ...


class FaultSink(Protocol):
    """appliance.detector.serving.recovery.PipelineRecovery: a failed request that means the model broke."""

    def note(self, route: Route, fault: Fault, submitted: float) -> None: ...


class FrameMetrics(Protocol):
    """appliance.health.metrics.ApplianceMetrics: what the frame path counts and times."""

    def record_inferred(self, camera_id: str, inference_s: float, capture_to_result_s: float) -> None: ...
    def record_inference_error(self, camera_id: str, reason: str) -> None: ...
    def record_frame_dropped(self, camera_id: str, reason: str) -> None: ...


@dataclass(frozen=True)
class Model:
    """Where frames are inferred: the server, the route each frame takes, and who hears that the model broke."""

    server: InferenceServer
    router: RouteHolder
    recovery: FaultSink | None = None
    request_timeout_s: float | None = None


@dataclass(frozen=True)
class Reports:
    """Where the frame path reports: metrics, the appliance's "last error" (status line, health summary), and the
    clock of the capture's ``t_mono`` (time.monotonic)."""

    metrics: FrameMetrics
    on_error: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic


class FramePath:
    """Submits frames and hands their results on; ``latencies_ms`` keeps the newest capture-to-result times,
    ``rate`` the inferences completed per second over the last 10 s."""

    def __init__(self, model: Model, sinks: Sinks, reports: Reports, *,
                 analytics: Mapping[str, CameraAnalytics] | None = None,
                 calibration: CalibrationFeed | None = None) -> None:
        self._server, self._router, self._recovery = model.server, model.router, model.recovery
        self._request_timeout_s = model.request_timeout_s
        self._sinks = sinks
        self._metrics, self._on_error, self._clock = reports.metrics, reports.on_error, reports.clock
        self.latencies_ms: deque[float] = deque(maxlen=10_000)  # capture-to-result, newest last
        self._completed = 0
        self.rate = RecentRate(10.0, clock=reports.clock)
        self._lock = threading.Lock()
        self.analytics: dict[str, CameraAnalytics] = dict(analytics or {})
        self.calibration = calibration  # first-boot INT8 calibration frames, while it wants more
        self._in_flight: dict[tuple[str, int], tuple[Route, float]] = {}  # (camera, seq) -> (route, submitted)
        # The frame tap: pixels copied at submit (the ring slot goes back once Triton read it) for the analytics'
        # snapshots and the sinks that asked, until the frame's result. Nobody asking: one lookup, no copy.
        self._taken: dict[tuple[str, int], tuple[np.ndarray, tuple[Sink, ...]]] = {}

    @property
    def completed(self) -> int:
        """Frames whose detections were handed to the sinks."""
        with self._lock:
            return self._completed

    def on_drop(self, camera_id: str, reason: str) -> None:
        self._metrics.record_frame_dropped(camera_id, reason)

    def submit(self, camera_id: str, lease: Lease) -> Future[Any]:
        meta = lease.meta
        stage = self.analytics.get(camera_id)
        wanting = self._sinks.wanting_frame(camera_id)
        if wanting or (stage is not None and stage.wants_frames):
            self._taken[(camera_id, meta.seq)] = (np.array(lease.array, copy=True), wanting)
        if self.calibration is not None and not self.calibration.done:
            self.calibration.offer(camera_id, lease.array, meta.pixel_format, meta.t_mono)
        route = self._router.acquire()  # released in on_result, or here if the request never starts
        submitted = self._clock()
        try:
            future = self._server.infer_async(
                route.ensemble,
                {"IMAGE": lease.array, "CHANNEL_ORDER": np.array([meta.pixel_format.upper().encode()], dtype=object)},
                OUTPUTS, request_id=f"{camera_id}:{meta.seq}", timeout_s=self._request_timeout_s,
                on_inputs_released=lease.release,
            )
        except BaseException:
            self._router.release(route, False, 0.0)
            self._taken.pop((camera_id, meta.seq), None)
            raise
        self._in_flight[(camera_id, meta.seq)] = (route, submitted)
        return future

    def on_result(self, camera_id: str, meta: FrameMeta, future: Future[Any]) -> None:
        done = self._clock()
        route, submitted = self._in_flight.pop((camera_id, meta.seq))
        ok, found = False, 0
        pixels, wanting = self._taken.pop((camera_id, meta.seq), (None, ()))
        try:
            error = future.exception() if not future.cancelled() else None
            if future.cancelled() or error is not None:
                self._failed(camera_id, meta, route, error, submitted)
                return
            latency = {"queue": (submitted - meta.t_mono) * 1000, "inference": (done - submitted) * 1000,
                       "total": (done - meta.t_mono) * 1000}
            self._metrics.record_inferred(camera_id, done - submitted, max(0.0, done - meta.t_mono))
            self.rate.note()  # inference completed: counted even when its result cannot be kept
            self.latencies_ms.append(latency["total"])
            model = ModelInfo(route.model, route.version or "base", route.model_hash)
            message = build_message(meta, future.result().outputs, model, route.class_names, latency)
            stage = self.analytics.get(camera_id)
            if stage is not None:
                message = self._track(stage, meta, message, pixels)
            ok, found = True, len(message.detections)
            if wanting and pixels is not None:
                self._sinks.hand_frame(camera_id, Frame(pixels, meta.pixel_format, message), wanting)
            self._sinks.hand_detections(message)
            if stage is not None:
                stage.publish_pending()
            with self._lock:
                self._completed += 1
        finally:
            self._router.release(route, ok, done - submitted, found)

    def _track(self, stage: CameraAnalytics, meta: FrameMeta, message: DetectionsMessage,
               pixels: np.ndarray | None) -> DetectionsMessage:
        """The message with track ids; a failing analytics stage costs the track ids, never the detections."""
        try:
            return stage.step(meta, message, pixels)
        except Exception as exc:
            text = f"camera {meta.camera_id} frame {meta.seq}: analytics failed: {exc}"
            self._on_error(text)
            log.exception("%s", text, extra={"camera": meta.camera_id, "stage": "analytics"})
            return message

    def _failed(self, camera_id: str, meta: FrameMeta, route: Route, error: BaseException | None,
                submitted: float) -> None:
        reason = type(error).__name__ if error is not None else "cancelled"
        self._metrics.record_inference_error(camera_id, reason)
        fault = fault_from_error(error, route)
        if fault is not None and self._recovery is not None:  # stop sending frames now, reload next tick
            self._recovery.note(route, fault, submitted)
        text = f"camera {camera_id} frame {meta.seq} ({route.label}): {error or 'cancelled'}"
        self._on_error(text)
        log.warning("inference failed: %s", text, extra={"camera": camera_id, "stage": "inference"})
