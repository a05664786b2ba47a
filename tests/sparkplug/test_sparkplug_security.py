"""The edge node connects with the MQTT section's TLS and credentials (the publisher's build_client), MQTT 3.1.1
and 5; a refused connection is never "connected", is retried with backoff, and each CONNECT takes a new bdSeq."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from appliance.mqtt.config import MqttConfig
from appliance.mqtt.errors import MqttConfigError
from appliance.sparkplug.node import EdgeNode
from appliance.sparkplug.reports import Readings
from support.mosquitto import Mosquitto, make_tls_material
from support.wait import wait_until


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    tls = make_tls_material(tmp_path / "pki")
    with Mosquitto(tmp_path / "broker", tls=tls, require_certificate=True, passwords={"cell": "s3cret"}) as b:
        yield b


def doc(broker: Mosquitto, password: str, protocol: str = "3.1.1") -> dict[str, Any]:
    tls = broker.tls
    assert tls is not None
    return {"host": "localhost", "port": broker.port, "device_id": "dev1", "protocol": protocol,
            "username": "cell", "password": password,
            "tls": {"ca": str(tls.ca.cert), "cert": str(tls.client.cert), "key": str(tls.client.key)},
            "backoff": {"initial_s": 0.05, "max_s": 0.2, "jitter": 0.0}, "sparkplug": {"group_id": "plant1"}}


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_mutual_tls_and_password_from_the_mqtt_section(tmp_path: Path, secure_broker: Mosquitto,
                                                       protocol: str) -> None:
    node = EdgeNode(MqttConfig.model_validate(doc(secure_broker, "s3cret", protocol)), Readings,
                    tmp_path / "state").start()
    try:
        assert node.wait_connected(20), node.last_error
        assert node.connects == 1 and node.bd_seq == 0
    finally:
        node.stop()


def test_a_wrong_password_is_refused_never_connected_and_each_attempt_takes_a_new_bdseq(
        tmp_path: Path, secure_broker: Mosquitto) -> None:
    node = EdgeNode(MqttConfig.model_validate(doc(secure_broker, "wrong")), Readings, tmp_path / "state").start()
    try:
        wait_until(lambda: (node.bd_seq or 0) >= 3, 20, message="a few refused attempts")
        assert not node.connected and node.connects == 0
        assert node.last_error is not None and "refused the connection" in node.last_error, node.last_error
    finally:
        node.stop()
    assert (tmp_path / "state" / "sparkplug-bdseq").read_text().strip() == str(node.bd_seq)


def test_missing_tls_material_fails_at_start_naming_the_setting(tmp_path: Path, broker: Mosquitto) -> None:
    config = MqttConfig.model_validate({"host": broker.host, "port": broker.port, "device_id": "dev1",
                                        "tls": {"ca": str(tmp_path / "nope.crt")}, "sparkplug": {"group_id": "g"}})
    with pytest.raises(MqttConfigError, match=r"mqtt\.tls\.ca: no such file"):
        EdgeNode(config, Readings, tmp_path / "state").start()
