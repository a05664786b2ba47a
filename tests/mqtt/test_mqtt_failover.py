"""Broker failover (mqtt.hosts) with real brokers: the active broker is SIGKILLed mid-stream with detections in
flight, and every camera's numbered stream still arrives, in order, at the union of the two brokers'
subscribers; the publisher says which broker it is on; the backoff comes between full rounds only."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mqtt_helpers import CameraStreams, validate
from support.mosquitto import Mosquitto, TlsMaterial, issue_cert, make_ca
from support.mqttdocs import subscriber_check
from support.ports import free_port
from support.subscriber import Message, Subscriber
from support.wait import wait_until

from appliance.mqtt.config import MqttConfig
from appliance.mqtt.publisher import MqttPublisher, State

CAMERAS = ("cam0", "cam1", "cam2")
TOPICS = ["plant/dev1/+/detections"]


def _config(hosts: list[Any], **overrides: Any) -> MqttConfig:
    doc: dict[str, Any] = {"hosts": hosts, "device_id": "dev1", "topic_prefix": "plant",
                           "backoff": {"initial_s": 0.2, "max_s": 0.5, "jitter": 0.0},
                           "health_interval_s": 1, "keepalive_s": 5, "connect_timeout_s": 5}
    doc.update(overrides)
    return MqttConfig.model_validate(doc)


def _by_camera(messages: list[Message]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {cam: [] for cam in CAMERAS}
    for m in messages:
        payload = json.loads(m.payload)
        out[payload["camera_id"]].append(payload)
    return out


def _union_complete(messages: list[Message], sent: dict[str, int]) -> bool:
    got = _by_camera(messages)
    return all({p["message_seq"] for p in got[cam]} >= set(range(1, sent[cam] + 1)) for cam in CAMERAS)


@pytest.mark.slow
def test_sigkill_of_the_active_broker_moves_to_the_next_and_loses_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="appliance.mqtt")
    first = Mosquitto(tmp_path / "a").start()
    second = Mosquitto(tmp_path / "b").start()
    sub_first = Subscriber(first, TOPICS)
    sub_second = Subscriber(second, TOPICS)
    # Two spellings of an entry: host:port text and a mapping.
    config = _config([f"127.0.0.1:{first.port}", {"host": "127.0.0.1", "port": second.port}])
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    streams = CameraStreams(publisher, CAMERAS, 0.01)
    try:
        publisher.start()
        assert publisher.wait_connected(15)
        assert publisher.stats().broker == f"127.0.0.1:{first.port}"
        streams.start()
        assert sub_first.wait_for(lambda ms: len(ms) >= 60)
        # A hung broker first, so detections are surely sent and unacknowledged when it dies: those must be
        # sent again, from the spool, to the second broker, which never saw them. It hangs with everything
        # before it delivered: a broker stopped between its PUBACK and its forward would lose a message it had
        # taken responsibility for, which no publisher can resend.
        streams.hold()
        assert publisher.wait_idle(30), publisher.stats()
        wait_until(lambda: _union_complete(sub_first.messages, streams.sent), 30,
                   message="the first broker's subscriber has everything published before the hang")
        first.pause()
        streams.release()
        in_flight = wait_until(lambda: publisher.stats().inflight, 20, message="detections in flight to the "
                               "hung broker")
        first.kill()
        wait_until(lambda: publisher.state is State.CONNECTED
                   and publisher.stats().broker == f"127.0.0.1:{second.port}", 30,
                   message="the publisher on the second broker")
        assert sub_second.wait_for(lambda ms: len(ms) >= in_flight + 30)  # the stream goes on there
        streams.stop()
        assert publisher.wait_idle(60), publisher.stats()

        wait_until(lambda: _union_complete(sub_first.messages + sub_second.messages, streams.sent), 30,
                   message="every message_seq of every camera at one of the subscribers")
        # In order per camera, read as a subscriber of both brokers would: everything from the first broker,
        # then everything from the second; a redelivery (same message_id) is the only duplicate allowed
        # (docs/mqtt.md's subscriber check, run as documented).
        check = subscriber_check()
        before, after = _by_camera(sub_first.messages), _by_camera(sub_second.messages)
        for cam in CAMERAS:
            assert check(before[cam] + after[cam]) == [], cam
            assert max(p["message_seq"] for p in after[cam]) == streams.sent[cam]
        # The unacknowledged window reached the second broker: its first message per camera follows on from,
        # or repeats, what the first broker's subscriber had.
        for cam in CAMERAS:
            last_before = max((p["message_seq"] for p in before[cam]), default=0)
            assert after[cam][0]["message_seq"] <= last_before + 1, cam
        stats = publisher.stats()
        assert stats.connects == 2 and stats.spool.backlog == 0 and stats.spool.set_aside == 0
        health = publisher.health_payload()
        validate("health", health)
        assert health["mqtt"]["broker"] == f"127.0.0.1:{second.port}"
        logged = caplog.text
        assert f"MQTT connection to 127.0.0.1:{first.port} lost" in logged
        assert f"trying the next broker, 127.0.0.1:{second.port}, now" in logged
        assert f"MQTT connected to 127.0.0.1:{second.port} (broker 2 of 2)" in logged

        # It stays on the second broker while that one holds, and returns to the first when it fails.
        first.start()
        assert publisher.stats().connects == 2
        second.kill()
        wait_until(lambda: publisher.state is State.CONNECTED and publisher.stats().connects == 3, 30,
                   message="the publisher back on the first broker")
        assert publisher.stats().broker == f"127.0.0.1:{first.port}"
    finally:
        streams.halt()
        publisher.stop()
        sub_first.close()
        sub_second.close()
        first.stop()
        second.stop()


def test_the_backoff_comes_between_full_rounds_not_between_brokers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="appliance.mqtt.session")
    ports = [free_port(), free_port()]  # nothing listens: every connect is refused at once
    publisher = MqttPublisher(_config([f"127.0.0.1:{p}" for p in ports],
                                      backoff={"initial_s": 0.3, "max_s": 0.3, "jitter": 0.0}),
                              tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        wait_until(lambda: publisher.stats().connect_failures >= 6, 30, message="three failed rounds")
    finally:
        publisher.stop()
    stats = publisher.stats()
    assert stats.connects == 0 and stats.state is State.STOPPED
    # One delay per round of two brokers, none between the two brokers of a round.
    assert len(stats.backoff_delays) == stats.connect_failures // 2
    assert set(stats.backoff_delays) == {0.3}
    logged = caplog.text
    assert f"127.0.0.1:{ports[0]} (connection refused)" in logged
    assert f"trying the next broker, 127.0.0.1:{ports[1]}, now" in logged
    assert f"trying the next broker, 127.0.0.1:{ports[0]}, in 0.3 s (every broker failed" in logged


def test_with_one_broker_the_backoff_is_between_attempts_as_before(tmp_path: Path) -> None:
    publisher = MqttPublisher(_config([f"127.0.0.1:{free_port()}"]), tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        wait_until(lambda: publisher.stats().connect_failures >= 3, 30, message="three failed attempts")
    finally:
        publisher.stop()
    stats = publisher.stats()
    assert len(stats.backoff_delays) == stats.connect_failures


def test_tls_settings_apply_to_every_broker_and_each_certificate_is_checked_against_its_own_host(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="appliance.mqtt.session")
    ca = make_ca(tmp_path / "pki")
    client = issue_cert(ca, tmp_path / "pki", "client", server=False)
    # The first broker's certificate names only "localhost", and it is reached as 127.0.0.1: refused. The second
    # names 127.0.0.1: accepted, with the same TLS settings.
    names_localhost = TlsMaterial(ca, issue_cert(ca, tmp_path / "pki", "server-a", server=True, ips=()), client)
    names_ip = TlsMaterial(ca, issue_cert(ca, tmp_path / "pki", "server-b", server=True, hostnames=()), client)
    with Mosquitto(tmp_path / "a", tls=names_localhost, require_certificate=True) as first, \
            Mosquitto(tmp_path / "b", tls=names_ip, require_certificate=True) as second:
        tls = {"ca": str(ca.cert), "cert": str(client.cert), "key": str(client.key)}
        publisher = MqttPublisher(_config([f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"], tls=tls),
                                  tmp_path / "spool.sqlite3")
        publisher.start()
        try:
            assert publisher.wait_connected(20)
            stats = publisher.stats()
            assert stats.broker == f"127.0.0.1:{second.port}" and stats.connect_failures >= 1
            assert f"the broker certificate at 127.0.0.1:{first.port} failed verification" in caplog.text
        finally:
            publisher.stop()
        # Reached by the name its certificate holds, the first broker is accepted (a list of one).
        publisher = MqttPublisher(_config([f"localhost:{first.port}"], tls=tls), tmp_path / "spool2.sqlite3")
        publisher.start()
        try:
            assert publisher.wait_connected(20), publisher.stats().last_error
        finally:
            publisher.stop()
