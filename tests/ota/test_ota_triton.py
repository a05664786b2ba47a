"""OTA against the real embedded Triton, the real YOLOv3-tiny detector and a real mosquitto broker, with frames
flowing the whole time (two feeder threads submit through the Router like the supervisor's frame path, and
publish every result through the real MqttPublisher; a subscriber timestamps what arrives).

One server and one appliance state for the module; the tests run in order and each says what it expects to be
serving when it starts."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Iterator

import cv2
import numpy as np
import pytest
from ota_helpers import DETECTOR_ONNX, IMAGES, REPO, write_source, yolo_engine_profile, yolo_model_profile  # noqa: E402
from support.engineseed import seed_state_dir
from support.provisioned import require_detector
from support.schemas import validate_ota_status
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.detector.serving.router import Router
from appliance.detector.serving.switcher import ModelSpec, TritonSwitcher
from appliance.ota.commandsig import signature_check
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.delivery import OtaCommandHandler, is_read_only
from appliance.ota.errors import OtaRejected
from appliance.ota.manager import OtaManager

pytestmark = pytest.mark.slow
DOG = IMAGES / "dog.jpg"


def reference(profile_dict: dict[str, Any], image: np.ndarray) -> list[dict[str, Any]]:
    """Expected detections from the plain pipeline (ONNX Runtime on the original ONNX), an independent path."""
    from appliance.detector.engines.builders.ort import reference_session
    from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor
    from appliance.detector.profile import ModelProfile

    profile = ModelProfile.model_validate(profile_dict)
    session = reference_session(DETECTOR_ONNX)
    tensor, lb = Preprocessor(profile).frame(image, "BGR")
    det = Postprocessor(profile)(session.run(None, {"images": tensor.reshape(1, *tensor.shape[-3:])})[0][0], lb)
    return [{"class_name": profile.classes[int(c)], "score": round(float(s), 3), "box": [round(float(v), 1) for v in b]}
            for b, s, c in zip(det.boxes, det.scores, det.class_ids)]


class Feeders:
    """Frames flowing through whatever is routed; every result published over MQTT."""

    def __init__(self, server: Any, router: Router, publisher: Any, frame: np.ndarray, threads: int = 1) -> None:
        self.server, self.router, self.publisher, self.frame = server, router, publisher, frame
        self.results: list[tuple[float, str, bool, str]] = []  # (done, route label, ok, error)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]
        self._seq = 0
        self._lock = threading.Lock()

    def _run(self, i: int) -> None:
        from appliance.detections import Detections
        from appliance.mqtt.messages import DetectionsMessage, ModelInfo

        while not self._stop.is_set():
            route = self.router.acquire()
            t0 = time.monotonic()
            error, n = "", 0
            try:
                out = self.server.infer(route.ensemble, {"IMAGE": self.frame}, ["BOXES", "SCORES", "CLASSES"],
                                        timeout_s=60).outputs
                n = len(out["SCORES"])
                with self._lock:
                    self._seq += 1
                    seq = self._seq
                dets = Detections.untracked(out["BOXES"], out["SCORES"], out["CLASSES"], route.class_names)
                self.publisher.publish_detections(DetectionsMessage(
                    camera_id=f"cam{i}", seq=seq, capture_time=time.time(),
                    model=ModelInfo(route.model, route.version or "base", route.model_hash),
                    image_width=self.frame.shape[1], image_height=self.frame.shape[0], detections=dets,
                    latency_ms={"queue": 0.0, "inference": 1.0, "total": 1.0}))
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.router.release(route, not error, time.monotonic() - t0, n)
            with self._lock:
                self.results.append((time.monotonic(), route.label, not error, error))

    def start(self) -> "Feeders":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)


class Live:
    def __init__(self, tmp: Path, keys: Any) -> None:
        self.tmp, self.keys = tmp, keys
        self.events: list[Any] = []
        self.sub: Subscriber | None = None  # on the detections, from the fixture's broker

    def bundle(self, version: str, model_profile: dict[str, Any] | None = None, golden: Any = None,
               golden_files: Any = None) -> Path:
        from appliance.fleet.bundle import build_bundle

        src = write_source(self.tmp / "src" / version, version=version, onnx=DETECTOR_ONNX,
                           model_profile=model_profile or yolo_model_profile(), engine_profile=yolo_engine_profile(),
                           golden=golden, golden_files=golden_files)
        out = self.tmp / "bundles" / f"{version}.bundle"
        out.parent.mkdir(parents=True, exist_ok=True)
        build_bundle(src, self.keys.private, out)
        return out

    def wait_outcome(self, version: str, timeout: float = 240) -> Any:
        def outcome() -> Any:
            done = [e for e in self.events if e.version == version and e.state in ("active", "rolled_back", "rejected")]
            return done[-1] if done else None

        try:
            return wait_until(outcome, timeout, 0.1, f"an outcome for {version}")
        except AssertionError as failed:
            raise AssertionError(f"{failed}: {[(e.state, e.version) for e in self.events][-10:]}") from None

    @property
    def received(self) -> list[tuple[float, dict[str, Any]]]:
        """(arrival time, payload) of every detections message so far."""
        return [(m.at, m.json()) for m in self.sub.messages] if self.sub else []

    def received_between(self, t0: float, t1: float) -> list[float]:
        return [t for t, _ in self.received if t0 <= t <= t1]

    def validate_statuses(self) -> None:
        """Every status so far, as the supervisor would publish it on ota/status, matches its schema."""
        for event in self.events:
            validate_ota_status(event)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, keys: Any, engine_seed: Path) -> Iterator[Live]:
    require_detector()  # fails, not skips, without the detector

    from support.mosquitto import Mosquitto
    from support.triton import started_server

    from appliance.detector.engines import ensure_engines
    from appliance.detector.engines.devicerepo import PROFILES
    from appliance.detector.profile import load_profile
    from appliance.detector.repository.materialize import RepositoryOptions
    from appliance.mqtt.config import MqttConfig
    from appliance.mqtt.publisher import MqttPublisher

    tmp = tmp_path_factory.mktemp("ota-live")
    lv = Live(tmp, keys)
    state = seed_state_dir(tmp / "state", engine_seed)
    (engine,) = ensure_engines(REPO / "engines", state_dir=state, models_root=REPO / ".models",
                               builder="onnxruntime", models=["yolov3-tiny"])
    base = ModelSpec(None, load_profile(PROFILES / "yolov3-tiny.yaml"), engine)
    repo = state / "repository"
    repo.mkdir(parents=True)
    with Mosquitto(tmp / "broker") as broker, \
            started_server(repo, model_control="explicit", model_load_retries=0) as server:
        lv.sub = Subscriber(broker, "plant/dev1/+/detections")
        publisher = MqttPublisher(MqttConfig.model_validate(
            {"host": broker.host, "port": broker.port, "device_id": "dev1", "topic_prefix": "plant",
             "backoff": {"initial_s": 0.1, "max_s": 0.5, "jitter": 0.0}}), tmp / "spool.sqlite3",
            signature_check=signature_check(keys.trusted()), nonce_path=state / "mqtt-command-nonces.log")
        router = Router()
        switcher = TritonSwitcher(server, repo, router, options=RepositoryOptions(preprocess_instances=1))
        config = OtaConfig(trusted_keys=[keys.public], health=HealthPolicy(
            period_s=4, check_interval_s=0.2, min_requests=5, max_error_rate=0.2, max_latency_ratio=50))
        lv.manager = OtaManager(state, keys.trusted(), switcher, config=config, status_cb=lv.events.append,
                                base_spec=lambda: base)
        lv.handler = OtaCommandHandler(lv.manager, config, state / "ota" / "incoming")
        publisher.on_command("ota", lv.handler, read_only=is_read_only)  # as the supervisor registers it
        publisher.start()
        assert publisher.wait_connected(20)
        lv.server, lv.router, lv.repo, lv.broker = server, router, repo, broker
        lv.manager.start_serving()
        lv.feeders = Feeders(server, router, publisher, cv2.imread(str(DOG))).start()
        try:
            yield lv
        finally:
            lv.feeders.stop()
            lv.handler.join(240)
            publisher.stop()
            lv.sub.close()


def test_update_over_mqtt_chunks_switches_with_frames_flowing(live: Live) -> None:
    from appliance.fleet.push import chunk_payloads, push_mqtt
    from appliance.mqtt.config import MqttConfig
    from appliance.ota.signing import load_private_key

    assert live.router.current().version is None  # the base model serves
    profile = yolo_model_profile()
    profile["thresholds"].update(score=0.3, allow=["dog", "bicycle"])
    expected = reference(profile, cv2.imread(str(DOG)))
    assert {d["class_name"] for d in expected} == {"dog", "bicycle"}
    bundle = live.bundle("2", profile, golden=[{"file": "golden/dog.jpg", "expected": expected}],
                         golden_files={"golden/dog.jpg": DOG})
    t_push = time.monotonic()
    push_mqtt(MqttConfig(host=live.broker.host, port=live.broker.port, device_id="cli"), "dev1", "plant",
              list(chunk_payloads(bundle, 1 << 20)), sign_key=load_private_key(live.keys.private),
              reply_timeout_s=60)  # every chunk signed
    outcome = live.wait_outcome("2")
    t_done = time.monotonic()
    assert outcome.state == "active", outcome
    states = [e.state for e in live.events if e.version in ("2", None)]
    for step in ("received", "verifying", "staging", "building", "switching", "checking", "watching", "active"):
        assert step in states, (step, states)
    assert live.router.current().version == "2"
    assert live.manager.store.read_pointer().version == "2"
    # the old pipeline is unloaded and gone from the repository; the new one is loaded
    assert not live.server.model_ready("detect") and not (live.repo / "detect").exists()
    assert live.server.model_ready("ota-2-detect")
    # no frame failed during the whole update; frames after it come from the new model, allow-list applied
    during = [r for r in live.feeders.results if t_push <= r[0] <= t_done]
    assert during and all(r[2] for r in during), [r for r in during if not r[2]][:3]
    after = wait_until(lambda: [p for t, p in live.received if t > t_done and p["model"]["version"] == "2"], 60, 0.1,
                       "detections from version 2")
    assert all(d["class_name"] in ("dog", "bicycle") for p in after for d in p["detections"])
    assert any(p["detections"] for p in after)  # the allow-list let the dog through, not nothing at all
    arrivals = live.received_between(t_push, t_done)
    gaps = np.diff(arrivals)
    switch = [e.time for e in live.events if e.version == "2" and e.state in ("switching", "active")]
    print(f"\nOTA switch: {len(arrivals)} detections published during the update ({t_done - t_push:.1f} s, "
          f"load->active {switch[-1] - switch[0]:.1f} s); longest gap between published frames "
          f"{gaps.max() * 1000:.0f} ms, median {np.median(gaps) * 1000:.0f} ms")
    live.validate_statuses()


def test_model_that_fails_at_runtime_is_rolled_back(live: Live, tmp_path: Path) -> None:
    assert live.router.current().version == "2"
    # passes its golden frame (640 px wide), but refuses the cameras' 768 px frames: every live request fails
    profile = yolo_model_profile()
    profile["limits"]["max_width"] = 700
    small = tmp_path / "dog640.jpg"
    cv2.imwrite(str(small), cv2.resize(cv2.imread(str(DOG)), (640, 480)))
    expected = reference(profile, cv2.imread(str(small)))
    assert {"dog", "bicycle"} <= {d["class_name"] for d in expected}  # a golden frame with nothing in it proves nothing
    bundle = live.bundle("3", profile, golden=[{"file": "golden/dog640.jpg", "expected": expected}],
                         golden_files={"golden/dog640.jpg": small})
    result = live.manager.install(bundle)
    assert result["state"] == "rolled_back" and "error rate" in result["reason"], result
    assert live.events[-1].state == "rolled_back" and live.events[-1].code == "health"
    assert live.router.current().version == "2" and live.manager.store.read_pointer().version == "2"
    assert not live.server.model_ready("ota-3-detect") and not (live.repo / "ota-3-detect").exists()
    assert "3" not in live.manager.store.installed()
    failures = {r[1] for r in live.feeders.results if not r[2]}
    assert failures == {"yolov3-tiny@3"}  # only the bad version's requests failed
    live.validate_statuses()


def test_golden_frame_mismatch_is_rejected_before_any_traffic_moves(live: Live) -> None:
    assert live.router.current().version == "2"
    wrong = [{"class_name": "cat", "score": 0.9, "box": [100, 100, 300, 400]}]
    bundle = live.bundle("4", golden=[{"file": "golden/dog.jpg", "expected": wrong}],
                         golden_files={"golden/dog.jpg": DOG})
    with pytest.raises(OtaRejected) as info:
        live.manager.install(bundle)
    assert info.value.code == "golden_mismatch" and "missing ['cat@0.90']" in info.value.reason
    assert not any(r[1] == "yolov3-tiny@4" for r in live.feeders.results)
    assert not live.server.model_ready("ota-4-detect") and live.router.current().version == "2"
    live.validate_statuses()


def test_concurrent_updates_are_serialized(live: Live) -> None:
    assert live.router.current().version == "2"
    b5, b6 = live.bundle("5"), live.bundle("6")
    start = len(live.events)
    live.handler.handle({"path": str(b5)})
    live.handler.handle({"path": str(b6)})
    assert live.wait_outcome("5").state == "active" and live.wait_outcome("6").state == "active"
    order = [e.version for e in live.events[start:] if e.version in ("5", "6")]
    first = order[0]
    assert order == [first] * order.count(first) + [v for v in order if v != first], order  # no interleaving
    assert live.router.current().version == ("6" if first == "5" else "5")
    served = {r[1] for r in live.feeders.results[-5:]}
    assert served == {live.router.current().label}
    live.validate_statuses()


def test_manual_rollback_serves_the_previous_version(live: Live) -> None:
    before = live.manager.store.read_pointer()
    result = live.manager.rollback()
    assert result["to"] == before.history[-1] and live.router.current().version == before.history[-1]
    assert not live.server.model_ready(f"ota-{before.version}-detect")
    status = live.manager.status()
    assert status["active"] == before.history[-1] and status["serving"].endswith(f"@{before.history[-1]}")
    live.validate_statuses()
