"""The primary host's STATE and MQTT 5 behaviour the recorded life of test_sparkplug_tck.py does not cover: with
``mqtt.hosts`` the node walks to the broker where the host is online (waiting or born), and with MQTT 5 it
connects with a clean start and no session expiry and ends with DISCONNECT "with will message". The STATE judge's
rules on their own, too."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.mosquitto import Mosquitto
from support.sparkplug_b import SparkplugSubscriber

from appliance.mqtt.config import MqttConfig
from appliance.sparkplug.node import EdgeNode
from appliance.sparkplug.payload import DataType
from appliance.sparkplug.primaryhost import PrimaryHost, parse_state
from appliance.sparkplug.reports import Readings

STATE = "spBv1.0/STATE/scada"
READINGS = Readings(node={"Model/Version": (DataType.String, "base")},
                    devices={"cam1": {"State": (DataType.String, "streaming")}})


def doc(*brokers: Mosquitto, protocol: str = "3.1.1", host_id: str | None = "scada") -> dict[str, Any]:
    return {"hosts": [f"{b.host}:{b.port}" for b in brokers], "device_id": "dev1", "protocol": protocol,
            "keepalive_s": 5, "backoff": {"initial_s": 0.05, "max_s": 0.2, "jitter": 0.0},
            "sparkplug": {"group_id": "plant1", "interval_s": 0.05, "primary_host_id": host_id}}


def state(online: bool, timestamp: int) -> str:
    return json.dumps({"online": online, "timestamp": timestamp})


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Mosquitto, Mosquitto]]:
    with Mosquitto(tmp_path / "a") as a, Mosquitto(tmp_path / "b") as b:
        yield a, b


def test_tck_id_operational_behavior_primary_application_state_with_multiple_servers_walk(
        two: tuple[Mosquitto, Mosquitto], tmp_path: Path) -> None:
    a, b = two
    now = int(time.time() * 1000)
    on_a, on_b = SparkplugSubscriber(a), SparkplugSubscriber(b)
    node = None
    try:
        on_a.mqtt.publish(STATE, state(False, now), retain=True)  # the host is on b only
        on_b.mqtt.publish(STATE, state(True, now), retain=True)
        node = EdgeNode(MqttConfig.model_validate(doc(a, b)), lambda: READINGS, tmp_path / "state").start()
        born_b = on_b.wait_for(lambda m: [x for x in m if x.kind == "NBIRTH"], message="the NBIRTH on b")
        assert on_a.of("NBIRTH") == []  # connected to a first, never born there
        on_a.mqtt.publish(STATE, state(True, now + 1), retain=True)  # the host moves to a
        on_b.mqtt.publish(STATE, state(False, now + 1), retain=True)
        deaths = on_b.wait_for(lambda m: [x for x in m if x.kind == "NDEATH"], message="the NDEATH on b")
        born_a = on_a.wait_for(lambda m: [x for x in m if x.kind == "NBIRTH"], message="the NBIRTH on a")
        assert deaths[0].metrics["bdSeq"] == born_b[0].metrics["bdSeq"]
        assert born_a[0].metrics["bdSeq"] > born_b[0].metrics["bdSeq"] and born_a[0].seq == 0
        assert len(on_b.of("NBIRTH")) == 1 and on_a.undecodable == on_b.undecodable == []
    finally:
        if node is not None:
            node.stop()
        on_a.stop()
        on_b.stop()


def test_tck_id_payloads_ndeath_will_message_publisher_disconnect_mqtt50(broker: Mosquitto, tmp_path: Path) -> None:
    """With MQTT 5 the node's DISCONNECT asks for the will: the broker publishes it after the node's own NDEATH
    (mosquitto drops the will on any other reason code), so two NDEATHs of the same bdSeq arrive."""
    sub = SparkplugSubscriber(broker)
    node = EdgeNode(MqttConfig.model_validate(doc(broker, protocol="5", host_id=None)), lambda: READINGS,
                    tmp_path / "state").start()
    try:
        assert node.wait_connected(20), node.last_error
    finally:
        node.stop()
    deaths = sub.wait_for(lambda m: len([x for x in m if x.kind == "NDEATH"]) >= 2 and m, message="two NDEATHs")
    sub.stop()
    assert [m.metrics for m in deaths if m.kind == "NDEATH"] == [{"bdSeq": 0}, {"bdSeq": 0}]


def test_tck_id_principles_persistence_clean_session_50(tmp_path: Path) -> None:
    """Clean start and session expiry 0: mosquitto logs the clean start, and after the node leaves no session is
    left to resume under its client id."""
    with Mosquitto(tmp_path / "broker", extra_config=["log_type debug"]) as broker:
        node = EdgeNode(MqttConfig.model_validate(doc(broker, protocol="5", host_id=None)), lambda: READINGS,
                        tmp_path / "state").start()
        try:
            assert node.wait_connected(20), node.last_error
        finally:
            node.stop()
        assert "as appliance-dev1-sparkplug (p5, c1," in broker.log_text()
        assert resume_session(broker, "appliance-dev1-sparkplug") is False


def resume_session(broker: Mosquitto, client_id: str) -> bool:
    """Whether the broker still held a session for ``client_id`` (CONNACK's session present, MQTT 5)."""
    present: list[bool] = []
    done = threading.Event()

    def on_connect(_c: Any, _u: Any, flags: Any, _r: Any, _p: Any) -> None:
        present.append(bool(flags.session_present))
        done.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    client.on_connect = on_connect
    client.connect(broker.host, broker.port, clean_start=False)
    client.loop_start()
    try:
        assert done.wait(10), "no CONNACK"
    finally:
        client.disconnect()
        client.loop_stop()
    return present[0]


def test_a_state_counts_only_for_its_host_in_its_form_and_not_older_than_the_last() -> None:
    host = PrimaryHost("scada")
    assert host.judge("a", "spBv1.0/STATE/other", state(True, 5).encode()) is None
    assert host.judge("a", STATE, b'{"online": "yes", "timestamp": 5}') is None
    assert host.judge("a", STATE, b"\xff") is None
    assert host.judge("a", STATE, state(True, 10).encode()) is True
    assert host.judge("a", STATE, state(False, 9).encode()) is None      # older: stale
    assert host.judge("a", STATE, state(False, 10).encode()) is False    # as new: counts
    assert host.judge("b", STATE, state(True, 1).encode()) is True       # each broker its own
    assert parse_state(b'{"online": true, "timestamp": 1.7e12}') == (True, 1_700_000_000_000)
    with pytest.raises(ValueError, match="timestamp"):
        parse_state(b'{"online": true, "timestamp": true}')
