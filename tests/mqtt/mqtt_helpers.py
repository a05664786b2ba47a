"""MQTT test helpers (imported by name; fixtures live in conftest.py): a recording subscriber, publisher
configs, frames, schema validation."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import jsonschema
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from appliance.mqtt.config import MqttConfig
from appliance.mqtt.messages import DetectionsMessage, ModelInfo
from appliance.mqtt.schema import load_schema
from support.detections import rows
from support.mosquitto import Mosquitto, TlsMaterial

MODEL = ModelInfo("yolov3-tiny", "1", "sha256:" + "ab" * 32)


class Subscriber:
    """A real paho client on its own network thread that records everything on ``topics``.

    Persistent session (clean_session False, fixed client id) so that, with a broker that keeps persistence,
    nothing published while it is reconnecting is lost to it."""

    def __init__(self, host: str, port: int, topics: list[str], *, persistent: bool = False,
                 protocol: int = paho.MQTTv311, tls: Optional[TlsMaterial] = None,
                 username: Optional[str] = None, password: Optional[str] = None) -> None:
        self.topics = topics
        self.messages: list[paho.MQTTMessage] = []
        self._cond = threading.Condition()
        kwargs: dict[str, Any] = {}
        if protocol == paho.MQTTv311:
            kwargs["clean_session"] = not persistent
        self.client = paho.Client(callback_api_version=CallbackAPIVersion.VERSION2,
                                  client_id=f"test-sub-{uuid.uuid4().hex[:8]}", protocol=protocol, **kwargs)
        if tls is not None:
            self.client.tls_set(ca_certs=str(tls.ca.cert), certfile=str(tls.client.cert), keyfile=str(tls.client.key))
        if username:
            self.client.username_pw_set(username, password)
        self.client.reconnect_delay_set(0.05, 0.5)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self._subscribed = threading.Event()
        self.client.on_subscribe = lambda *a: self._subscribed.set()
        self.client.connect(host, port, keepalive=30)
        self.client.loop_start()
        assert self._subscribed.wait(15), "test subscriber never got SUBACK"

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if not reason.is_failure:
            client.subscribe([(t, 1) for t in self.topics])

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(msg)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[paho.MQTTMessage]], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.messages):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def on_topic(self, suffix: str) -> list[paho.MQTTMessage]:
        with self._cond:
            return [m for m in self.messages if m.topic.endswith(suffix)]

    def json_on(self, suffix: str) -> list[dict[str, Any]]:
        return [json.loads(m.payload) for m in self.on_topic(suffix)]

    def stop(self) -> None:
        self.client.disconnect()  # first, so the network thread wakes up and loop_stop() returns at once
        self.client.loop_stop()


class CameraStreams:
    """Numbered detections from several cameras into ``publisher``, a thread each, every ``period_s`` until
    ``stop()``; every publish must be SPOOLED. ``sent[camera]`` counts what each camera published."""

    def __init__(self, publisher: Any, cameras: tuple[str, ...], period_s: float) -> None:
        from appliance.mqtt.publisher import PublishResult

        self.sent: dict[str, int] = {cam: 0 for cam in cameras}
        self.errors: list[BaseException] = []
        self._halt = threading.Event()

        def camera(cam: str) -> None:
            try:
                seq = 0
                while not self._halt.is_set():
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


