"""The retained ``<camera>/snapshot`` JPEG and the MQTT 5 user properties that tie it to its events, through a
real mosquitto and real paho subscribers: live, republished after the broker forgot it, and absent (without
error) under MQTT 3.1.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from mqtt_helpers import make_config
from support.mosquitto import Mosquitto
from support.subscriber import Message
from support.wait import wait_until

from appliance.mqtt.messages import snapshot_properties
from appliance.mqtt.publisher import MqttPublisher

TOPIC = "plant/dev1/cam0/snapshot"
JPEG = b"\xff\xd8\xff\xe0 not really a picture \xff\xd9"


def test_snapshot_properties_name_the_snapshot_its_events_and_its_frame() -> None:
    # 1000.5 s after the epoch is 00:16:40.5 on 1970-01-01
    assert snapshot_properties("s1", ["e1", "e2"], 1000.5, 42) == [
        ("snapshot_id", "s1"), ("event_id", "e1"), ("event_id", "e2"),
        ("capture_time", "1970-01-01T00:16:40.500Z"), ("capture_time_ms", "1000500"), ("frame_seq", "42")]


def _user_properties(message: Message) -> list[tuple[str, str]]:
    props = getattr(message, "properties", None)
    return list(getattr(props, "UserProperty", []) or [])


def test_mqtt5_snapshot_carries_its_event_ids_also_when_republished(tmp_path: Path, broker: Mosquitto,
                                                                    subscriber_factory: Any) -> None:
    about = snapshot_properties("a" * 32, ["b" * 32, "c" * 32], 1_700_000_000.25, 7)
    publisher = MqttPublisher(make_config(broker, protocol="5"), tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        assert publisher.wait_connected(20)
        live = subscriber_factory(broker, [TOPIC], protocol=paho.MQTTv5)
        publisher.publish_snapshot("cam0", JPEG, about)
        assert live.wait_for(lambda ms: len(ms) == 1)
        broker.restart()  # no persistence: the broker forgets the retained snapshot
        wait_until(lambda: publisher.stats().connects >= 2 and publisher.wait_connected(0), 20, 0.02,
                   "the publisher to reconnect")
        probe = subscriber_factory(broker, [TOPIC], protocol=paho.MQTTv5)  # has it, live or retained
        assert probe.wait_for(lambda ms: len(ms) >= 1)
        late = subscriber_factory(broker, [TOPIC], protocol=paho.MQTTv5)
        assert late.wait_for(lambda ms: len(ms) >= 1)
    finally:
        publisher.stop()
    for message in (live.messages[0], late.messages[0]):
        assert message.payload == JPEG
        assert _user_properties(message) == about
    assert late.messages[0].retain
    assert [v for k, v in _user_properties(late.messages[0]) if k == "event_id"] == ["b" * 32, "c" * 32]


def test_mqtt311_snapshot_is_the_bare_jpeg(tmp_path: Path, broker: Mosquitto, subscriber_factory: Any) -> None:
    publisher = MqttPublisher(make_config(broker), tmp_path / "spool.sqlite3")  # 3.1.1, the default
    publisher.start()
    try:
        assert publisher.wait_connected(20)
        publisher.publish_snapshot("cam0", JPEG, snapshot_properties("a" * 32, ["b" * 32], 1.0, 1))
        # the publish is queued, not sent: once a first subscriber has it (live or retained), the broker holds it,
        # and a subscriber that comes after gets it as a retained message
        probe = subscriber_factory(broker, [TOPIC])
        assert probe.wait_for(lambda ms: len(ms) >= 1)
        sub = subscriber_factory(broker, [TOPIC], protocol=paho.MQTTv5)  # a v5 reader sees no properties
        assert sub.wait_for(lambda ms: len(ms) >= 1)
    finally:
        publisher.stop()
    assert sub.messages[0].payload == JPEG and sub.messages[0].retain
    assert _user_properties(sub.messages[0]) == []
