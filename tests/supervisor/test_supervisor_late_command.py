"""The ``ota`` command is registered before the publisher connects (servedmodel.LateHandler): a command that
arrives before the OTA manager runs (a rollback the broker kept for the device while it was away) waits for it
and then runs, instead of answering ``unknown_command`` and being lost; one that waits too long, or arrives while
the appliance stops, gets a ``failed`` reply saying why. Real mosquitto, real publisher, real command topics."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.mqtt.messages import Command
from appliance.mqtt.publisher import MqttPublisher
from appliance.supervisor.servedmodel import LateHandler


@pytest.fixture
def started(tmp_path: Path, broker: Mosquitto) -> Iterator[tuple[MqttPublisher, LateHandler, Subscriber]]:
    from appliance.mqtt.config import MqttConfig

    config = MqttConfig(host=broker.host, port=broker.port, device_id="dev1", topic_prefix="plant")
    late = LateHandler("the OTA manager", wait_s=5.0)
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    publisher.on_command("ota", late, read_only=True)  # signatures are another test's: this is about timing
    publisher.start()
    assert publisher.wait_connected(20)
    sub = Subscriber(broker, "plant/dev1/reply")
    try:
        yield publisher, late, sub
    finally:
        late.close()
        sub.close()
        publisher.stop()


def _replies(sub: Subscriber) -> list[dict[str, Any]]:
    return [m.json() for m in sub.messages if m.topic == "plant/dev1/reply"]


def test_a_command_before_the_handler_exists_waits_for_it_and_runs(
        started: tuple[MqttPublisher, LateHandler, Subscriber]) -> None:
    _publisher, late, sub = started
    ran: list[Command] = []
    sub.client.publish("plant/dev1/command/ota", json.dumps({"request_id": "r1", "args": {"action": "status"}}),
                       qos=1)
    threading.Timer(1.0, late.set, args=[lambda cmd: ran.append(cmd) or {"state": "active"}]).start()
    wait_until(lambda: _replies(sub), timeout_s=15, message="the reply")
    (reply,) = _replies(sub)
    assert reply["ok"] is True and reply["result"] == {"state": "active"} and reply["request_id"] == "r1"
    assert [c.args for c in ran] == [{"action": "status"}]


def test_a_command_whose_handler_never_comes_gets_a_failed_reply_that_says_why(
        started: tuple[MqttPublisher, LateHandler, Subscriber]) -> None:
    _publisher, late, sub = started
    late.wait_s = 0.5
    sub.client.publish("plant/dev1/command/ota", json.dumps({"request_id": "r2", "args": {"action": "status"}}),
                       qos=1)
    wait_until(lambda: _replies(sub), timeout_s=15, message="the reply")
    (reply,) = _replies(sub)
    assert reply["ok"] is False and reply["error"]["code"] == "failed"
    assert "the OTA manager is not running after 0.5 s" in reply["error"]["message"]
    assert "send the command again" in reply["error"]["message"]


def test_stopping_answers_a_waiting_command_at_once(started: tuple[MqttPublisher, LateHandler, Subscriber]) -> None:
    _publisher, late, sub = started
    late.wait_s = 60.0
    sub.client.publish("plant/dev1/command/ota", json.dumps({"request_id": "r3", "args": {}}), qos=1)
    threading.Timer(0.5, late.close).start()
    wait_until(lambda: _replies(sub), timeout_s=10, message="the reply")  # well before wait_s
    (reply,) = _replies(sub)
    assert reply["ok"] is False and "the OTA manager is stopping" in reply["error"]["message"]
