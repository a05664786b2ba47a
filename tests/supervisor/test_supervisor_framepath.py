"""The frame path on its own (appliance.pipeline.framepath): a leased frame into the routed ensemble, its result
out to the sinks, a broken model noted to recovery at once, the route always released, frames copied only for a
sink that asks. Real router, recovery
and metrics; the server and publisher are small stand-ins satisfying the protocols (the end-to-end tests cover the
same path with Triton and a broker)."""

from __future__ import annotations

import tracemalloc
from concurrent.futures import Future
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.backoff import RestartPolicy
from appliance.capture.ring import FrameMeta
from appliance.detector.serving.recovery import PipelineRecovery
from appliance.detector.serving.router import Route, Router
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.messages import DetectionsMessage
from appliance.pipeline.framepath import FramePath, Model, Reports
from appliance.pipeline.sink import Frame, Sink, Sinks
from appliance.pipeline.sinks import MqttSink
from appliance.triton.errors import InternalError
from appliance.triton.infer import InferResult

ROUTE = Route("ota-v2-detect", ("ota-v2-detector", "ota-v2-detect"), "yolov3-tiny", "v2", ("person", "dog"),
              engine_key="0123456789abcdef0123", model_hash="sha256:" + "5e" * 32)


class Server:
    """Records each request; the test finishes its future."""

    def __init__(self, refuse: BaseException | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.refuse = refuse

    def infer_async(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None, *,
                    request_id: str = "", timeout_s: float | None = None,
                    on_inputs_released: Callable[[], None] | None = None) -> Future[Any]:
        if self.refuse is not None:
            raise self.refuse
        future: Future[Any] = Future()
        self.requests.append({"model": model, "inputs": inputs, "outputs": outputs, "request_id": request_id,
                              "timeout_s": timeout_s, "on_inputs_released": on_inputs_released,
                              "future": future})
        return future


class Publisher:
    def __init__(self) -> None:
        self.messages: list[DetectionsMessage] = []

    def publish_detections(self, message: DetectionsMessage) -> object:
        self.messages.append(message)
        return "spooled"


class Lease:
    def __init__(self, meta: FrameMeta) -> None:
        self.meta = meta
        self.array = np.zeros((meta.height, meta.width, 3), np.uint8)
        self.released = 0

    def release(self) -> None:
        self.released += 1


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _samples(metrics: ApplianceMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}


@pytest.fixture
def parts() -> dict[str, Any]:
    clock = Clock(100.0)
    router = Router(ROUTE)
    recovery = PipelineRecovery(lambda route, models: None, RestartPolicy(), clock=clock)
    errors: list[str] = []
    server, publisher, metrics = Server(), Publisher(), ApplianceMetrics()
    frames = FramePath(Model(server, router, recovery, request_timeout_s=5.0), Sinks([MqttSink(publisher)]),
                       Reports(metrics, errors.append, clock))
    return {"clock": clock, "router": router, "recovery": recovery, "errors": errors, "server": server,
            "publisher": publisher, "metrics": metrics, "frames": frames}


def _frame(seq: int = 7, t_mono: float = 99.95) -> Lease:
    return Lease(FrameMeta("cam1", seq, t_mono, 1_700_000_000.25, 64, 48, "bgr"))


def test_a_frame_goes_to_the_routed_ensemble_and_its_detections_to_the_publisher(parts: dict[str, Any]) -> None:
    frames, server, router, clock = parts["frames"], parts["server"], parts["router"], parts["clock"]
    lease = _frame()
    future = frames.submit("cam1", lease)
    [request] = server.requests
    assert request["model"] == ROUTE.ensemble and request["request_id"] == "cam1:7"
    assert request["inputs"]["IMAGE"] is lease.array  # zero copy: the ring's memory goes to Triton
    assert request["inputs"]["CHANNEL_ORDER"].tolist() == [b"BGR"]
    assert request["outputs"] == ["BOXES", "SCORES", "CLASSES"] and request["timeout_s"] == 5.0
    assert router.inflight(ROUTE.ensemble) == 1
    request["on_inputs_released"]()  # Triton is done with the input memory: the ring slot is free again
    assert lease.released == 1

    clock.now = 100.02
    future.set_result(InferResult(ROUTE.ensemble, 1, "cam1:7", {
        "BOXES": np.array([[1, 2, 30, 40]], np.float32), "SCORES": np.array([0.9], np.float32),
        "CLASSES": np.array([1], np.int32)}))
    frames.on_result("cam1", lease.meta, future)

    [message] = parts["publisher"].messages
    assert (message.camera_id, message.seq) == ("cam1", 7)
    assert (message.model.name, message.model.version, message.model.hash) == ("yolov3-tiny", "v2",
                                                                                   "sha256:" + "5e" * 32)
    assert [d.class_name for d in message.detections] == ["dog"]
    assert message.latency_ms == {"queue": 50.0, "inference": 20.0, "total": 70.0}
    assert frames.completed == 1 and list(frames.latencies_ms) == [pytest.approx(70.0)]
    assert frames.rate.per_second() == pytest.approx(1 / 0.02)  # one inference in the 20 ms since the path began
    assert router.inflight(ROUTE.ensemble) == 0
    sample = router.stats(ROUTE.ensemble, since=0)
    assert (sample.requests, sample.errors, sample.with_detections) == (1, 0, 1)
    samples = _samples(parts["metrics"])
    assert samples[("appliance_frames_inferred_total", (("camera", "cam1"),))] == 1
    assert samples[("appliance_stage_latency_seconds_count", (("stage", "capture_to_result"),))] == 1
    assert parts["errors"] == [] and parts["recovery"].drop_reason() is None


def test_a_request_failing_because_a_stub_died_stops_frames_at_once(parts: dict[str, Any]) -> None:
    frames, recovery = parts["frames"], parts["recovery"]
    lease = _frame(seq=8)
    future = frames.submit("cam1", lease)
    parts["clock"].now = 101.0
    future.set_exception(InternalError("in ensemble 'ota-v2-detect', Stub process 'ota-v2-detector_0_0' is not "
                                       "healthy."))
    frames.on_result("cam1", lease.meta, future)

    assert parts["publisher"].messages == [] and frames.completed == 0 and frames.rate.per_second() == 0
    assert recovery.drop_reason() == "model_failed"  # the scheduler drops the next frame, before any tick
    assert parts["errors"] and "cam1 frame 8 (yolov3-tiny@v2)" in parts["errors"][0]
    assert parts["router"].inflight(ROUTE.ensemble) == 0
    assert parts["router"].stats(ROUTE.ensemble, since=0).errors == 1
    samples = _samples(parts["metrics"])
    assert samples[("appliance_inference_errors_total", (("camera", "cam1"), ("reason", "InternalError")))] == 1


def test_a_cancelled_request_is_counted_but_is_not_a_model_failure(parts: dict[str, Any]) -> None:
    frames = parts["frames"]
    lease = _frame(seq=9)
    future = frames.submit("cam1", lease)
    future.cancel()
    frames.on_result("cam1", lease.meta, future)
    assert parts["recovery"].drop_reason() is None
    assert parts["errors"] == ["camera cam1 frame 9 (yolov3-tiny@v2): cancelled"]
    assert _samples(parts["metrics"])[("appliance_inference_errors_total",
                                       (("camera", "cam1"), ("reason", "cancelled")))] == 1


def test_a_request_that_never_starts_releases_its_route(parts: dict[str, Any]) -> None:
    parts["server"].refuse = RuntimeError("server is stopping")
    with pytest.raises(RuntimeError, match="stopping"):
        parts["frames"].submit("cam1", _frame())
    assert parts["router"].inflight(ROUTE.ensemble) == 0  # or an OTA switch would wait for it forever


def test_a_dropped_frame_is_counted_by_reason(parts: dict[str, Any]) -> None:
    parts["frames"].on_drop("cam1", "recovering")
    parts["frames"].on_drop("cam1", "recovering")
    assert _samples(parts["metrics"])[("appliance_frames_dropped_total",
                                       (("camera", "cam1"), ("reason", "recovering")))] == 2


class EveryOther(Sink):
    """Asks for every second frame of cam1 and keeps what it gets; a broken sink after it in the list."""

    def __init__(self) -> None:
        self.asked, self.frames = 0, []

    def wants_frame(self, camera_id: str) -> bool:
        self.asked += 1
        return camera_id == "cam1" and self.asked % 2 == 0

    def on_frame(self, camera_id: str, frame: Frame) -> None:
        self.frames.append((camera_id, frame))


class Broken(Sink):
    def on_detections(self, message: DetectionsMessage) -> None:
        raise RuntimeError("this sink is broken")


def _infer(frames: FramePath, server: Server, seq: int, grey: int) -> int:
    """A 640x480 frame of ``grey`` pixels submitted, the ring slot overwritten once Triton read it, its result
    back; the peak of what was allocated meanwhile (tracemalloc sees numpy's buffers)."""
    lease = Lease(FrameMeta("cam1", seq, 99.95, 1_700_000_000.25, 640, 480, "bgr"))
    lease.array[:] = grey
    tracemalloc.start()
    try:
        future = frames.submit("cam1", lease)
        server.requests[-1]["on_inputs_released"]()
        lease.array[:] = 255  # the capture process writes the next frame into the slot
        future.set_result(InferResult(ROUTE.ensemble, 1, f"cam1:{seq}", {
            "BOXES": np.zeros((0, 4), np.float32), "SCORES": np.zeros(0, np.float32),
            "CLASSES": np.zeros(0, np.int32)}))
        frames.on_result("cam1", lease.meta, future)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_frame_tap_copies_only_the_frames_a_sink_asks_for(parts: dict[str, Any]) -> None:
    tap, publisher, server = EveryOther(), parts["publisher"], Server()
    frames = FramePath(Model(server, parts["router"]), Sinks([tap, MqttSink(publisher), Broken()]),
                       Reports(parts["metrics"], parts["errors"].append, parts["clock"]))
    peaks = [_infer(frames, server, seq, 10 * seq) for seq in range(1, 6)]
    size = 640 * 480 * 3
    assert [seq for seq, peak in enumerate(peaks, 1) if peak >= size] == [2, 4]  # copied: only those asked for
    assert max(peaks[0], peaks[2], peaks[4]) < size / 4
    assert [f.message.seq for _, f in tap.frames] == [2, 4]  # at the sink's own rate
    for _, frame in tap.frames:  # the pixels as they were at submit, in a copy the ring no longer owns
        assert frame.pixels.shape == (480, 640, 3) and (frame.pixels == 10 * frame.message.seq).all()
        assert frame.pixel_format == "bgr"
    # A sink that raises is logged; the MQTT sink before it and the frame count go on.
    assert [m.seq for m in publisher.messages] == [1, 2, 3, 4, 5] and frames.completed == 5
