"""The frame path with a camera's analytics, without Triton: the detections get track ids once a track is
confirmed, events reach the publisher behind their frame's detections, and the snapshot shows the pixels of the
frame that raised the event even though its ring slot was overwritten after the lease was released (the frame
path copies at submit). A full encoder queue drops the snapshot and never blocks the completion thread."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import cv2
import numpy as np

from appliance.analytics.config import AnalyticsConfig, LineConfig, SnapshotConfig
from appliance.backoff import RestartPolicy
from appliance.capture.ring import FrameMeta
from appliance.detector.serving.recovery import PipelineRecovery, PipelineState
from appliance.detector.serving.router import Route, Router
from appliance.events import Event
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.messages import DetectionsMessage
from appliance.pipeline.eventstage import CameraAnalytics, StageParts
from appliance.pipeline.framepath import FramePath, Model, Reports
from appliance.pipeline.sink import Sinks
from appliance.pipeline.sinks import MqttSink
from appliance.pipeline.snapshots import SnapshotJob, SnapshotStore, SnapshotWorker
from appliance.triton.errors import UnavailableError
from appliance.triton.infer import InferResult

ROUTE = Route("detect", ("detector", "detect"), "yolov3-tiny", None, ("person", "dog"),
              engine_key="0123456789abcdef0123", model_hash="sha256:" + "5e" * 32)
ROUTE_V2 = Route("ota-2-detect", ("ota-2-detector", "ota-2-detect"), "yolov3-tiny", "2", ("person", "dog"),
                 engine_key="fedcba9876543210fedc", model_hash="sha256:" + "7a" * 32)
W, H = 320, 240


class Server:
    def __init__(self) -> None:
        self.futures: list[Future[Any]] = []

    def infer_async(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None, *,
                    request_id: str = "", timeout_s: float | None = None,
                    on_inputs_released: Callable[[], None] | None = None) -> Future[Any]:
        assert on_inputs_released is not None
        on_inputs_released()  # Triton took the input: the slot may be overwritten from now on
        future: Future[Any] = Future()
        self.futures.append(future)
        return future


class Publisher:
    def __init__(self) -> None:
        self.order: list[tuple[str, Any]] = []
        self.snapshots: list[tuple[str, bytes]] = []
        self.snapshot_properties: list[list[tuple[str, str]]] = []

    def publish_detections(self, message: DetectionsMessage) -> object:
        self.order.append(("detections", message))
        return "spooled"

    def publish_events(self, events: Sequence[Event]) -> int:
        self.order.extend(("event", e) for e in events)
        return len(events)

    def publish_counts(self, camera_id: str, last_event_seq: int, active_tracks: int, counts: Any) -> None:
        self.order.append(("counts", counts))

    def publish_snapshot(self, camera_id: str, jpeg: bytes, user_properties: Sequence[tuple[str, str]] = ()) -> None:
        self.snapshots.append((camera_id, jpeg))
        self.snapshot_properties.append(list(user_properties))


class Lease:
    def __init__(self, ring: np.ndarray, meta: FrameMeta) -> None:
        self.meta, self.array, self.released = meta, ring, False  # a view on the one shared slot

    def release(self) -> None:
        self.released = True


def _result(x: float) -> InferResult:
    box = np.array([[x, 100, x + 30, 200]], np.float32)
    return InferResult(ROUTE.ensemble, 1, "cam", {"BOXES": box, "SCORES": np.array([0.9], np.float32),
                                                  "CLASSES": np.array([0], np.int32)})


def _walk(tmp_path: Path, queue_size: int = 4, switch_at: int | None = None,
          recovery: tuple[int, int, PipelineRecovery] | None = None,
          ) -> tuple[Publisher, SnapshotWorker, list[int]]:
    """One person walking left to right across the door line; ``switch_at``: the frame at which an OTA switch
    moves traffic to another model version (the router's route changes, as OtaManager does it); ``recovery``
    (fail_at, tick_at, recovery): the request of frame fail_at fails as a dead stub makes it fail, the recovery
    gate drops the frames after it (as the scheduler does), and the tick before frame tick_at reloads."""
    config = AnalyticsConfig(classes={"person": 0.3},
                             lines=[LineConfig(name="door", a=(160, 0), b=(160, 240), in_side="right")],
                             tracker={"birth_frames": 2}, snapshots=SnapshotConfig(max_width=W, jpeg_quality=95))
    publisher, metrics = Publisher(), ApplianceMetrics()
    store = SnapshotStore(tmp_path / "snapshots", {"cam": 10})
    worker = SnapshotWorker(store, {"cam": config.snapshots}, publisher.publish_snapshot, queue_size=queue_size)
    sinks = Sinks([MqttSink(publisher)])
    camera = SimpleNamespace(id="cam", frame_size=(W, H), analytics=config)
    stage = CameraAnalytics(camera, ["person", "dog"], StageParts(sinks, metrics, snapshots=worker))
    router = Router(ROUTE)
    server = Server()
    path = FramePath(Model(server, router, recovery[2] if recovery else None), sinks,
                     Reports(metrics, lambda _t: None), analytics={"cam": stage})
    ring = np.zeros((H, W, 3), np.uint8)  # one slot, reused by every frame: what a busy ring does
    brightness = []
    for seq, x in enumerate(range(100, 220, 10)):
        if seq == switch_at:
            router.set(ROUTE_V2)
        ring[:] = 10 + 15 * seq  # this frame's own grey level
        brightness.append(10 + 15 * seq)
        if recovery is not None:
            fail_at, tick_at, pipeline = recovery
            if seq == tick_at:
                pipeline.step(router.current(), [])
            reason = pipeline.drop_reason()
            if reason is not None:
                path.on_drop("cam", reason)
                continue
        meta = FrameMeta("cam", seq, 0.0, 1000.0 + seq, W, H, "bgr")
        lease = Lease(ring, meta)
        future = path.submit("cam", lease)
        assert lease.released
        ring[:] = 255  # the capture process reuses the slot before the result comes back
        if recovery is not None and seq == recovery[0]:
            future.set_exception(UnavailableError("Stub process 'detector_0_0' is not healthy"))
        else:
            future.set_result(_result(float(x)))
        path.on_result("cam", meta, future)
    worker.stop()
    return publisher, worker, brightness


def test_track_ids_events_in_order_and_the_snapshot_is_the_submitted_frame(tmp_path: Path) -> None:
    publisher, worker, brightness = _walk(tmp_path)
    messages = [m for kind, m in publisher.order if kind == "detections"]
    ids = [d.track_id for m in messages for d in m.detections]
    assert ids[0] is None and ids[-1] is not None and len(set(ids[1:]) - {None}) == 1  # one walker, one id
    [(at, event)] = [(i, m) for i, (kind, m) in enumerate(publisher.order) if kind == "event"]
    assert event.event == "cross" and event.line == "door" and event.direction == "out"  # left->right: out
    kind, before = publisher.order[at - 1]  # the event follows its own frame's detections message
    assert kind == "detections" and before.seq == event.frame_seq
    sidecar = json.loads((tmp_path / "snapshots" / "cam" / f"{event.snapshot_id}.json").read_text())
    assert sidecar["frame_seq"] == event.frame_seq
    assert [b["box"] for b in sidecar["boxes"]] == [list(event.box)]
    jpeg = (tmp_path / "snapshots" / "cam" / f"{event.snapshot_id}.jpg").read_bytes()
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    # away from the drawn box, the picture is the event frame's grey, not the slot's later 255
    assert abs(int(image[20, 20, 0]) - brightness[event.frame_seq]) <= 3
    assert worker.store.event_jpeg(event.event_id) == jpeg
    assert publisher.snapshots and publisher.snapshots[-1][1] == jpeg
    about = dict(publisher.snapshot_properties[-1])  # the MQTT 5 user properties that tie it to its event
    assert (about["snapshot_id"], about["event_id"], about["frame_seq"]) == (event.snapshot_id, event.event_id,
                                                                             str(event.frame_seq))


def test_a_full_encoder_queue_drops_the_snapshot_without_blocking(tmp_path: Path) -> None:
    gate = threading.Event()
    config = AnalyticsConfig(lines=[LineConfig(name="door", a=(160, 0), b=(160, 240), in_side="right")])
    store = SnapshotStore(tmp_path / "s", {"cam": 5})
    publisher = Publisher()
    worker = SnapshotWorker(store, {"cam": config.snapshots}, lambda c, j, p: gate.wait(10), queue_size=1)
    job = SnapshotJob("a" * 32, "cam", 1, 0.0, np.zeros((H, W, 3), np.uint8), "bgr", [], ["e" * 32], frozenset())
    offered = [worker.offer(job) for _ in range(5)]  # the worker holds one, the queue one; the rest are dropped
    assert offered[:1] == [True] and offered.count(False) >= 3
    assert worker.counters()["dropped"]["cam"] == offered.count(False)
    gate.set()
    worker.stop()
    assert publisher.snapshots == []


def test_track_ids_and_event_seq_survive_an_ota_switch_mid_walk(tmp_path: Path) -> None:
    """The tracker lives in the supervisor, not in a model: traffic moving to another version mid-walk keeps the
    walker's id and still raises the one crossing (the same as without a switch)."""
    publisher, _, _ = _walk(tmp_path, switch_at=5)
    messages = [m for kind, m in publisher.order if kind == "detections"]
    assert {m.model.version for m in messages} == {"base", "2"}  # frames before and after the switch
    ids = {d.track_id for m in messages for d in m.detections} - {None}
    assert len(ids) == 1, f"one walker, one id across the switch, got {ids}"
    events = [m for kind, m in publisher.order if kind == "event"]
    assert [(e.event, e.direction, e.seq) for e in events] == [("cross", "out", 1)]


def test_track_ids_and_event_seq_survive_a_model_recovery_mid_walk(tmp_path: Path) -> None:
    """A stub dies mid-walk: frame 4's request fails, the gate drops frames 5..7 while the recovery is due, the
    tick reloads the model and frames flow again at 8. The walker crossed the door (x=160) while no frame was
    inferred (its feet at 145 in frame 3, 195 in frame 8); it keeps its id and raises the one crossing. The
    tracker predicts across the five missing frames: predicted one frame on from frame 3 its box would not
    overlap frame 8's at all, and the walker would come back as a new track with no crossing."""
    reloads: list[tuple[str, list[str]]] = []
    pipeline = PipelineRecovery(lambda route, models: reloads.append((route.ensemble, list(models))),
                                RestartPolicy())
    publisher, _, _ = _walk(tmp_path, recovery=(4, 8, pipeline))
    assert reloads == [("detect", ["detector"])] and pipeline.state is PipelineState.SERVING
    messages = [m for kind, m in publisher.order if kind == "detections"]
    assert [m.seq for m in messages] == [0, 1, 2, 3, 8, 9, 10, 11]  # 4 failed, 5..7 dropped by the gate
    ids = {d.track_id for m in messages for d in m.detections} - {None}
    assert len(ids) == 1, f"one walker, one id across the recovery, got {ids}"
    events = [m for kind, m in publisher.order if kind == "event"]
    assert [(e.event, e.direction, e.seq, e.frame_seq) for e in events] == [("cross", "out", 1, 8)]
