"""The shipped least-privilege ACL (docs/examples/mosquitto/acl) in a real mosquitto with a password file: the
real MqttPublisher, logged in as its device, works fully under it (detections, status, health, a command and its
reply); a subscriber cannot command a device; one device cannot publish as another nor command it. With MQTT
3.1.1 mosquitto drops a denied publish without an error to the sender, so each denial is asserted on what a
client with read access receives: nothing. A barrier message that is allowed, sent after the denied ones, proves
the reader was listening. The password file tool for machines without mosquitto_passwd is tested here too."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import paho.mqtt.client as paho
import pytest
from mqtt_helpers import frame, make_config, validate
from paho.mqtt.enums import CallbackAPIVersion
from support.mosquitto import Mosquitto, publish_as, shipped_acl
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.mqtt.messages import Command
from appliance.mqtt.publisher import MqttPublisher, PublishResult

REPO = Path(__file__).resolve().parents[2]
PASSWORDS = {"dev1": "pw-dev1", "dev2": "pw-dev2", "operator@ops": "pw-op", "dashboard@ops": "pw-dash"}


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    acl = shipped_acl(tmp_path / "acl", ["dev1", "dev2"])
    with Mosquitto(tmp_path / "broker", passwords=PASSWORDS, extra_config=[f"acl_file {acl}"]) as b:
        yield b


def _reader(broker: Mosquitto, user: str, topics: list[str]) -> Subscriber:
    return Subscriber(broker, topics, username=user, password=PASSWORDS[user])


def _as(broker: Mosquitto, user: str, topic: str, payload: str, retain: bool = False) -> None:
    publish_as(broker, user, PASSWORDS[user], topic, payload, retain=retain)


def _payloads(sub: Subscriber) -> list[str]:
    return [m.payload.decode(errors="replace") for m in list(sub.messages)]


@pytest.fixture
def device(tmp_path: Path, acl_broker: Mosquitto) -> Iterator[tuple[MqttPublisher, list[Command]]]:
    (tmp_path / "dev1.password").write_text("pw-dev1\n")
    config = make_config(acl_broker, topic_prefix="appliance", device_id="dev1", username="dev1",
                         password_file=str(tmp_path / "dev1.password"))
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    calls: list[Command] = []

    def status(cmd: Command) -> dict[str, Any]:
        calls.append(cmd)
        return {"ok": True}

    publisher.on_command("status", status, read_only=True)  # changes nothing: no signature needed
    publisher.start()
    try:
        assert publisher.wait_connected(20), publisher.stats().last_error
        yield publisher, calls
    finally:
        publisher.stop()


def test_a_device_works_fully_under_the_acl(acl_broker: Mosquitto, device: Any) -> None:
    publisher, calls = device
    operator = _reader(acl_broker, "operator@ops", ["appliance/#"])
    dashboard = _reader(acl_broker, "dashboard@ops", ["appliance/#"])
    try:
        for seq in range(3):
            assert publisher.publish_detections(frame("cam0", seq)) is PublishResult.SPOOLED
        publisher.publish_health_now()
        command = operator.client.publish("appliance/dev1/command/status", json.dumps({"request_id": "op-1"}), qos=1)
        command.wait_for_publish(5)
        for sub in (operator, dashboard):
            assert sub.wait_for(lambda ms: {m.topic for m in ms} >= {
                "appliance/dev1/cam0/detections", "appliance/dev1/status", "appliance/dev1/health",
                "appliance/dev1/reply"}), sorted({m.topic for m in sub.messages})
        assert publisher.wait_idle(10)
        dets = operator.json_on("/detections")
        assert [d["seq"] for d in dets] == [0, 1, 2]
        reply = operator.json_on("/reply")[0]
        validate("command_reply", reply)
        assert (reply["request_id"], reply["ok"], reply["result"]) == ("op-1", True, {"ok": True})
        assert [c.request_id for c in calls] == ["op-1"]
        assert publisher.stats().connects == 1  # never dropped by the broker for a denied publish
    finally:
        operator.close()
        dashboard.close()


def test_a_subscriber_cannot_command_a_device(acl_broker: Mosquitto, device: Any) -> None:
    publisher, calls = device
    operator = _reader(acl_broker, "operator@ops", ["appliance/dev1/reply"])
    try:
        _as(acl_broker, "dashboard@ops", "appliance/dev1/command/status", json.dumps({"request_id": "dash-1"}))
        # The sentinel: the broker had handled dash-1 before op-2 was sent on the same topic, so it reaches the
        # device first; the device answers commands in order on one connection (MQTT keeps its QoS 1 order).
        _as(acl_broker, "operator@ops", "appliance/dev1/command/status", json.dumps({"request_id": "op-2"}))
        assert operator.wait_for(lambda ms: any(json.loads(m.payload)["request_id"] == "op-2" for m in ms))
        assert [c.request_id for c in calls] == ["op-2"]
        assert [json.loads(p)["request_id"] for p in _payloads(operator)] == ["op-2"]
    finally:
        operator.close()


def test_a_device_cannot_publish_as_another_nor_command_it(acl_broker: Mosquitto, device: Any) -> None:
    publisher, calls = device
    operator = _reader(acl_broker, "operator@ops", ["appliance/#"])
    try:
        forged = {"appliance/dev1/status": "forged-status", "appliance/dev1/cam0/detections": "forged-detections",
                  "appliance/dev1/health": "forged-health", "appliance/dev1/command/status": "forged-command",
                  "appliance/other/status": "forged-elsewhere",
                  "appliance/dev2/command/ota": "forged-own-command"}  # no device writes a command topic
        # No same-connection sentinel: mosquitto closes a connection after a denied publish. Each _as returns once
        # the broker has handled its message (routed to subscribers when allowed), so a reader's one connection
        # gets anything forged that got through before the barrier sent after it.
        for topic, marker in forged.items():
            _as(acl_broker, "dev2", topic, json.dumps({"request_id": marker, "marker": marker}))
        _as(acl_broker, "dev2", "appliance/dev2/status", json.dumps({"marker": "dev2-own"}))  # the barrier
        # A forged command would have reached dev1 before this one on the same topic (the broker had handled it),
        # and dev1 answers in order: once this reply is here, a forged command's reply would be too.
        _as(acl_broker, "operator@ops", "appliance/dev1/command/status", json.dumps({"request_id": "op-3"}))
        assert operator.wait_for(lambda ms: any("dev2-own" in p for p in _payloads(operator)))
        assert operator.wait_for(lambda ms: any(m.topic == "appliance/dev1/reply"
                                                and json.loads(m.payload)["request_id"] == "op-3" for m in ms))
        leaked = [p for p in _payloads(operator) if "forged" in p]
        assert leaked == [] and [c.request_id for c in calls] == ["op-3"]
    finally:
        operator.close()


def test_the_shipped_acl_loads_without_warnings(acl_broker: Mosquitto) -> None:
    warnings = [line for line in acl_broker.log_path.read_text().splitlines()
                if "Warning" in line and "run as root" not in line]
    assert warnings == [] and "acl" in acl_broker.conf_path.read_text()


def test_only_an_operator_sets_a_groups_desired_state_and_a_device_reads_it(
        acl_broker: Mosquitto, device: Any) -> None:
    publisher, _calls = device
    topic = "appliance/groups/line-1/ota/desired"
    received: list[bytes] = []

    def markers() -> list[str]:
        return [json.loads(p)["marker"] for p in list(received)]

    # The operator's retained state reaches the device once its subscription is in place (the SUBACK comes first).
    _as(acl_broker, "operator@ops", topic, json.dumps({"marker": "operator-retained"}), retain=True)
    publisher.subscribe(topic, received.append)
    wait_until(lambda: received, message="the retained desired state")
    for user in ("dashboard@ops", "dev2", "dev1"):
        _as(acl_broker, user, topic, json.dumps({"marker": f"forged-by-{user}"}))
    # The barrier: sent after the forged ones, so any that got through would arrive before it.
    _as(acl_broker, "operator@ops", topic, json.dumps({"marker": "operator"}))
    wait_until(lambda: "operator" in markers(), message="the operator's desired state")
    assert markers() == ["operator-retained", "operator"]


def test_password_file_written_by_the_python_tool_is_read_by_mosquitto(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    for user, password in (("dev1", "pw-dev1"), ("dev2", "old"), ("dev2", "pw-dev2")):  # the last one wins
        subprocess.run([sys.executable, str(REPO / "scripts/mosquitto_passwd.py"), "--stdin", str(passwd), user],
                       input=password + "\n", text=True, check=True, timeout=30)
    assert passwd.stat().st_mode & 0o777 == 0o600
    assert [line.split(":")[0] for line in passwd.read_text().splitlines()] == ["dev1", "dev2"]
    with Mosquitto(tmp_path / "broker", extra_config=[f"password_file {passwd}"]) as broker:
        def connack(user: str, password: str) -> Any:
            client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"pw-{uuid.uuid4().hex[:8]}")
            client.username_pw_set(user, password)
            answer: list[Any] = []
            client.on_connect = lambda c, u, f, reason, p: answer.append(reason)
            client.connect(broker.host, broker.port)
            deadline = time.monotonic() + 10
            while not answer and time.monotonic() < deadline:
                client.loop(0.1)
            client.disconnect()
            assert answer, "no CONNACK"
            return answer[0]

        assert not connack("dev1", "pw-dev1").is_failure
        assert not connack("dev2", "pw-dev2").is_failure
        assert connack("dev2", "old").is_failure
        assert connack("dev1", "pw-dev2").is_failure
