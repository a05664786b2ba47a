"""TLS with a generated CA and client certificates, and username/password, against a real mosquitto."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mqtt_helpers import frame, make_config, validate
from support.mosquitto import Mosquitto, issue_cert, make_ca, make_tls_material
from support.wait import wait_until

from appliance.mqtt.errors import MqttConfigError
from appliance.mqtt.publisher import MqttPublisher, PublishResult, State


@pytest.fixture
def pki(tmp_path: Path) -> Any:
    return make_tls_material(tmp_path / "pki")


@pytest.fixture
def tls_broker(tmp_path: Path, pki: Any) -> Any:
    with Mosquitto(tmp_path / "broker", tls=pki, require_certificate=True) as b:
        yield b


def test_mutual_tls_publishes_detections(tmp_path: Path, pki: Any, tls_broker: Mosquitto,
                                         subscriber_factory: Any) -> None:
    sub = subscriber_factory(tls_broker, ["plant/#"], tls=pki)
    config = make_config(tls_broker, tls={"ca": str(pki.ca.cert), "cert": str(pki.client.cert),
                                          "key": str(pki.client.key)})
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        assert publisher.wait_connected(20), publisher.stats().last_error
        for seq in range(5):
            assert publisher.publish_detections(frame("cam0", seq)) is PublishResult.SPOOLED
        assert sub.wait_for(lambda ms: sum(m.topic.endswith("/detections") for m in ms) >= 5)
    finally:
        publisher.stop()
    dets = sub.json_on("/detections")
    assert [d["seq"] for d in dets] == list(range(5))
    for d in dets:
        validate("detections", d)


def test_broker_certificate_from_an_unknown_ca_is_refused_clearly(tmp_path: Path, pki: Any,
                                                                  tls_broker: Mosquitto) -> None:
    other_ca = make_ca(tmp_path / "other", "other-ca")
    config = make_config(tls_broker, tls={"ca": str(other_ca.cert), "cert": str(pki.client.cert),
                                          "key": str(pki.client.key)})
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        wait_until(lambda: publisher.stats().connect_failures >= 2, 20, 0.05, "2 failed connects")  # it keeps retrying
        stats = publisher.stats()
        assert stats.state is State.CONNECTING and stats.connects == 0
        assert "certificate" in stats.last_error and "verif" in stats.last_error, stats.last_error
    finally:
        publisher.stop()


def test_client_certificate_not_signed_by_the_broker_ca_is_refused_clearly(tmp_path: Path, pki: Any,
                                                                           tls_broker: Mosquitto) -> None:
    rogue_ca = make_ca(tmp_path / "rogue", "rogue-ca")
    rogue_client = issue_cert(rogue_ca, tmp_path / "rogue", "rogue-client", server=False)
    config = make_config(tls_broker, tls={"ca": str(pki.ca.cert), "cert": str(rogue_client.cert),
                                          "key": str(rogue_client.key)})
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        wait_until(lambda: publisher.stats().connect_failures >= 2, 20, 0.05, "2 failed connects")
        stats = publisher.stats()
        assert stats.connects == 0 and not publisher.wait_connected(0.1)
        assert "closed the connection before CONNACK" in stats.last_error, stats.last_error
        assert "check mqtt.tls.cert and mqtt.tls.key" in stats.last_error, stats.last_error
    finally:
        publisher.stop()


def test_plain_client_on_a_tls_listener_gets_a_hint(tmp_path: Path, tls_broker: Mosquitto) -> None:
    publisher = MqttPublisher(make_config(tls_broker), tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        wait_until(lambda: publisher.stats().connect_failures >= 2, 20, 0.05, "2 failed connects")
        stats = publisher.stats()
        assert stats.connects == 0
        assert "configure mqtt.tls" in stats.last_error, stats.last_error
    finally:
        publisher.stop()


def test_missing_tls_file_fails_at_start_naming_the_setting(tmp_path: Path, broker: Mosquitto) -> None:
    config = make_config(broker, tls={"ca": str(tmp_path / "nope.crt")})
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    with pytest.raises(MqttConfigError, match=r"mqtt\.tls\.ca: no such file .*nope\.crt"):
        publisher.start()


@pytest.fixture
def auth_broker(tmp_path: Path) -> Any:
    with Mosquitto(tmp_path / "broker", passwords={"camera-box": "s3cret"}) as b:
        yield b


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_wrong_password_is_a_clear_error_never_connected_and_retried_with_backoff(
        tmp_path: Path, auth_broker: Mosquitto, protocol: str) -> None:
    config = make_config(auth_broker, protocol=protocol, username="camera-box", password="wrong",
                         backoff={"initial_s": 0.05, "max_s": 0.4, "multiplier": 2.0, "jitter": 0.0})
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        # Detections are accepted and kept while the broker refuses us.
        assert publisher.publish_detections(frame("cam0", 0)) is PublishResult.SPOOLED
        wait_until(lambda: publisher.stats().connect_failures >= 5, 20, 0.05, "5 failed connects")
        stats = publisher.stats()
        assert not publisher.wait_connected(0.1)
        assert stats.connects == 0 and stats.state is State.CONNECTING  # refused never counts as connected
        assert "refused the connection" in stats.last_error
        assert "check mqtt.username and the password" in stats.last_error, stats.last_error
        assert list(stats.backoff_delays[:5]) == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.4])
        assert stats.spool.backlog == 1
    finally:
        publisher.stop()


def test_password_file_authenticates(tmp_path: Path, auth_broker: Mosquitto, subscriber_factory: Any) -> None:
    secret = tmp_path / "mqtt-password"
    secret.write_text("s3cret\n")
    sub = subscriber_factory(auth_broker, ["plant/dev1/status"], username="camera-box", password="s3cret")
    config = make_config(auth_broker, username="camera-box", password_file=str(secret))
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        assert publisher.wait_connected(20), publisher.stats().last_error
        assert sub.wait_for(lambda ms: any(json.loads(m.payload)["state"] == "online" for m in ms))
    finally:
        publisher.stop()


def test_unreadable_password_file_fails_at_start(tmp_path: Path, auth_broker: Mosquitto) -> None:
    config = make_config(auth_broker, username="camera-box", password_file=str(tmp_path / "missing"))
    with pytest.raises(MqttConfigError, match=r"cannot read mqtt.password_file .*missing"):
        MqttPublisher(config, tmp_path / "spool.sqlite3").start()
