"""MqttPublisher.reconnect (a reload's new connection settings) with real brokers: detections stream while the
publisher moves to another broker with another client id; the ones the first broker never acknowledged (it hangs)
are sent again from the spool, so every camera's numbered stream arrives at the union of the two brokers'
subscribers. Settings it cannot use are refused before the running session is touched."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mqtt_helpers import CameraStreams
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.mqtt.config import MqttConfig
from appliance.mqtt.errors import MqttConfigError
from appliance.mqtt.publisher import MqttPublisher, State

CAMERAS = ("cam0", "cam1")
TOPICS = ["plant/dev1/+/detections", "plant/dev1/status"]


def _config(port: int, **overrides: Any) -> MqttConfig:
    return MqttConfig.model_validate({"host": "127.0.0.1", "port": port, "device_id": "dev1", "topic_prefix": "plant",
                                      "backoff": {"initial_s": 0.2, "max_s": 0.5, "jitter": 0.0},
                                      "keepalive_s": 5, "connect_timeout_s": 2, **overrides})


def _seqs(*subscribers: Subscriber) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {cam: set() for cam in CAMERAS}
    for sub in subscribers:
        for m in sub.messages:
            if m.topic.endswith("/detections"):
                payload = json.loads(m.payload)
                out[payload["camera_id"]].add(payload["message_seq"])
    return out


def test_reconnect_to_another_broker_resends_what_was_not_acknowledged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="appliance.mqtt")
    first, second = Mosquitto(tmp_path / "a").start(), Mosquitto(tmp_path / "b").start()
    sub_first, sub_second = Subscriber(first, TOPICS), Subscriber(second, TOPICS)
    publisher = MqttPublisher(_config(first.port), tmp_path / "spool.sqlite3")
    streams = CameraStreams(publisher, CAMERAS, 0.01)
    try:
        publisher.start()
        assert publisher.wait_connected(15)
        streams.start()
        assert sub_first.wait_for(lambda ms: len(ms) >= 40)
        # TLS material that is not there: refused before anything stops; the session goes on.
        with pytest.raises(MqttConfigError, match="mqtt.tls.ca"):
            publisher.reconnect(_config(second.port, tls={"ca": str(tmp_path / "missing.pem")}))
        assert publisher.state is State.CONNECTED and publisher.stats().connects == 1
        first.pause()  # hung: what is in flight now is never acknowledged there
        in_flight = wait_until(lambda: publisher.stats().inflight, 20, message="detections in flight to the hung "
                               "broker")
        publisher.reconnect(_config(second.port, client_id="dev1-moved", keepalive_s=10))
        wait_until(lambda: publisher.state is State.CONNECTED, 30, message="the publisher on the second broker")
        assert publisher.stats().broker == f"127.0.0.1:{second.port}"
        assert sub_second.wait_for(lambda ms: len(ms) >= in_flight + 20)  # the stream goes on there
        streams.stop()
        assert publisher.wait_idle(60), publisher.stats()
        wait_until(lambda: all(_seqs(sub_first, sub_second)[cam] >= set(range(1, streams.sent[cam] + 1))
                               for cam in CAMERAS), 30, message="every message_seq at one of the subscribers")
        stats = publisher.stats()
        assert stats.connects == 2 and stats.spool.backlog == 0
        assert f"MQTT connected to 127.0.0.1:{second.port} as dev1-moved" in caplog.text
        online = [json.loads(m.payload) for m in sub_second.messages if m.topic == "plant/dev1/status"]
        assert online and online[-1]["state"] == "online", online
    finally:
        streams.halt()
        publisher.stop()
        sub_first.close()
        sub_second.close()
        first.kill()
        second.stop()
