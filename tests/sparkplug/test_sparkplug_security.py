"""The edge node connects with the MQTT section's TLS and credentials (the publisher's build_client), MQTT 3.1.1
and 5; a refused connection is never "connected", is retried with backoff, and each CONNECT takes a new bdSeq.
Under the shipped least-privilege ACL (docs/examples/mosquitto/acl) it births and answers an operator's rebirth
request and waits for its primary host's STATE, while a subscriber's or another device's request, another device's
forged birth and its forged offline STATE, never arrive."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from support.mosquitto import Mosquitto, make_tls_material, publish_as, shipped_acl
from support.sparkplug_b import SparkplugSubscriber, rebirth_command
from support.wait import wait_until

from appliance.mqtt.config import MqttConfig
from appliance.mqtt.errors import MqttConfigError
from appliance.sparkplug.node import EdgeNode
from appliance.sparkplug.payload import DataType
from appliance.sparkplug.reports import Readings


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


USERS = {"dev1": "pw-dev1", "dev2": "pw-dev2", "operator@ops": "pw-op", "dashboard@ops": "pw-dash"}


def test_under_the_shipped_acl_only_an_operator_can_ask_for_a_rebirth_and_no_device_can_forge_a_birth(
        tmp_path: Path) -> None:
    acl = shipped_acl(tmp_path / "acl", ["dev1", "dev2"])
    with Mosquitto(tmp_path / "broker", passwords=USERS, extra_config=[f"acl_file {acl}"]) as broker:
        host = SparkplugSubscriber(broker, username="operator@ops", password=USERS["operator@ops"])
        host.mqtt.publish("spBv1.0/STATE/scada", '{"online": true, "timestamp": 1000}', retain=True)
        config = MqttConfig.model_validate({
            "host": broker.host, "port": broker.port, "device_id": "dev1", "username": "dev1",
            "password": USERS["dev1"], "backoff": {"initial_s": 0.05, "max_s": 0.2, "jitter": 0.0},
            "sparkplug": {"group_id": "plant1", "interval_s": 0.05, "primary_host_id": "scada"}})
        readings = Readings(node={"Model/Version": (DataType.String, "base")},
                            devices={"cam1": {"State": (DataType.String, "streaming")}})
        node = EdgeNode(config, lambda: readings, tmp_path / "state").start()
        try:
            assert node.wait_connected(20), node.last_error
            host.wait_for(lambda m: [x for x in m if x.kind == "DBIRTH" and x.device == "cam1"], message="births")
            ncmd = "spBv1.0/plant1/NCMD/dev1"
            # Each publish_as returns once the broker has handled its message (routed to every subscriber when
            # allowed, to none when denied), so a later one reaches the host's one connection after it: the
            # sentinels. (No same-connection sentinel: mosquitto closes a connection after a denied publish.)
            publish_as(broker, "dashboard@ops", USERS["dashboard@ops"], ncmd, rebirth_command(True, timestamp=101))
            publish_as(broker, "dev2", USERS["dev2"], ncmd, rebirth_command(True, timestamp=102))
            publish_as(broker, "dev2", USERS["dev2"], "spBv1.0/plant1/NBIRTH/dev1", rebirth_command(True, 103))
            publish_as(broker, "dev2", USERS["dev2"], "spBv1.0/STATE/scada", '{"online": false, "timestamp": 2000}')
            publish_as(broker, "dev2", USERS["dev2"], "spBv1.0/plant1/NDATA/dev2", rebirth_command(True, 104))
            publish_as(broker, "operator@ops", USERS["operator@ops"], ncmd, rebirth_command(True, timestamp=105))
            host.wait_for(lambda m: [x for x in m if x.topic == "spBv1.0/plant1/NDATA/dev2"], message="dev2's own")
            wait_until(lambda: [c for c in host.commands if c.payload.timestamp == 105], message="the operator's NCMD")
            assert [(c.topic, c.payload.timestamp) for c in host.commands] == [(ncmd, 105)]  # only it reached dev1
            # so the node has exactly one rebirth to answer, and no other birth comes after it
            host.wait_for(lambda m: len([x for x in m if x.kind == "NBIRTH"]) >= 2
                          and len([x for x in m if x.kind == "DBIRTH" and x.device == "cam1"]) >= 2,
                          message="the operator's rebirth")
            assert len(host.of("NBIRTH")) == 2 and len(host.of("DBIRTH", "cam1")) == 2
            assert 103 not in [x.payload.timestamp for x in host.of("NBIRTH")]  # the node's own births, no forged one
            assert node.connects == 1  # never dropped for a publish the ACL denies, nor for dev2's forged STATE
        finally:
            node.stop()
            host.stop()
