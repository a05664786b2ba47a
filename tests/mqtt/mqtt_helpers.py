"""MQTT test helpers (imported by name; fixtures live in conftest.py): camera streams, publisher configs, frames,
schema validation. The recording subscriber is support.subscriber."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Optional

import jsonschema
from support.detections import rows
from support.mosquitto import Mosquitto

from appliance.mqtt.config import MqttConfig
from appliance.mqtt.messages import DetectionsMessage, ModelInfo
from appliance.mqtt.schema import load_schema

MODEL = ModelInfo("yolov3-tiny", "1", "sha256:" + "ab" * 32)


class CameraStreams:
    """Numbered detections from several cameras into ``publisher``, a thread each, every ``period_s`` until
    ``stop()``; every publish must be SPOOLED. ``sent[camera]`` counts what each camera published."""

    def __init__(self, publisher: Any, cameras: tuple[str, ...], period_s: float) -> None:
        from appliance.mqtt.publisher import PublishResult

        self.sent: dict[str, int] = {cam: 0 for cam in cameras}
        self.errors: list[BaseException] = []
        self._halt = threading.Event()
        self._go = threading.Event()
        self._go.set()

        def camera(cam: str) -> None:
            try:
                seq = 0
                while not self._halt.is_set():
                    if not self._go.is_set():  # held: publish nothing until released
                        self._go.wait(0.05)
                        continue
                    assert publisher.publish_detections(frame(cam, seq)) is PublishResult.SPOOLED
                    seq += 1
                    self.sent[cam] = seq
                    self._halt.wait(period_s)
            except BaseException as exc:  # surfaced by stop(), on the test's thread
                self.errors.append(exc)

        self._threads = [threading.Thread(target=camera, args=(cam,), daemon=True) for cam in cameras]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop the cameras, wait for them, and fail with what any of them raised."""
        self.halt()
        for t in self._threads:
            if t.ident is not None:  # started
                t.join(10)
        assert not self.errors, self.errors

    def hold(self) -> None:
        """Pause the cameras after the publish each may be making now (``release`` resumes them)."""
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    def halt(self) -> None:
        """Stop the cameras without waiting (a test's ``finally``)."""
        self._halt.set()


def make_config(broker: Mosquitto, **overrides: Any) -> MqttConfig:
    """Test config: fast backoff and health so tests stay short."""
    doc: dict[str, Any] = {"host": broker.host, "port": broker.port, "device_id": "dev1", "topic_prefix": "plant",
                           "backoff": {"initial_s": 0.1, "max_s": 0.5, "jitter": 0.0},
                           "health_interval_s": 1, "keepalive_s": 5}
    doc.update(overrides)
    return MqttConfig.model_validate(doc)


def frame(camera: str, seq: int, n_dets: int = 2, t: Optional[float] = None) -> DetectionsMessage:
    dets = rows(*((i % 3, ("person", "car", "dog")[i % 3], 0.5 + 0.1 * (i % 4), (10.0 * i, 20.0, 10.0 * i + 50, 120.0))
                  for i in range(n_dets)))
    return DetectionsMessage(camera_id=camera, seq=seq, capture_time=t if t is not None else time.time(),
                             model=MODEL, image_width=640, image_height=480, detections=dets,
                             latency_ms={"queue": 1.5, "inference": 20.0, "total": 21.5})


_SCHEMAS: dict[str, dict[str, Any]] = {}


def validate(message_type: str, payload: Any) -> None:
    """Raise jsonschema.ValidationError unless ``payload`` is a valid ``message_type`` message."""
    if message_type not in _SCHEMAS:
        schema = load_schema(message_type)
        jsonschema.Draft202012Validator.check_schema(schema)
        _SCHEMAS[message_type] = schema
    jsonschema.Draft202012Validator(_SCHEMAS[message_type],
                                    format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(payload)


def set_aside_payloads(spool_path: Path) -> list[dict[str, Any]]:
    """The payloads in a (closed) spool's set_aside table, read with plain sqlite3."""
    with sqlite3.connect(str(spool_path)) as db:
        return [json.loads(bytes(r[0])) for r in db.execute("SELECT payload FROM set_aside ORDER BY id")]


def seqs_by_camera(payloads: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Arrival order of sequence numbers per camera, duplicates (same message_id) dropped as a subscriber
    would."""
    seen: set[str] = set()
    out: dict[str, list[int]] = {}
    for p in payloads:
        if p["message_id"] in seen:
            continue
        seen.add(p["message_id"])
        out.setdefault(p["camera_id"], []).append(p["seq"])
    return out


