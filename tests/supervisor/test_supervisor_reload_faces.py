"""A reload restarts the Sparkplug node and the OPC UA server alone (appliance.supervisor.faces), each the real part:
the node through a real mosquitto (NDEATH of the old session, births with the next bdSeq under the new group), the
OPC UA server with asyncua's client (the new camera's line is in the address space). Each OPC UA start builds the
standard address space (seconds): two starts here."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from asyncua import Client, ua
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.sparkplug_b import SparkplugSubscriber

from appliance.appconfig.app import AppConfig
from appliance.mqtt.config import MqttConfig
from appliance.opcua.passwords import hash_password
from appliance.sparkplug.node import EdgeNode
from appliance.sparkplug.payload import DataType
from appliance.sparkplug.reports import Readings
from appliance.supervisor.faces import restart_opcua, restart_sparkplug
from appliance.supervisor.reloadplan import plan_reload

LINE = {"name": "door", "a": [0, 240], "b": [640, 240], "in_side": "left"}


def _doc(**sections: Any) -> dict[str, Any]:
    camera = {"id": "hall", "source": {"type": "file", "path": "/v/a.mp4"}, "width": 640, "height": 480, "fps": 10,
              "analytics": {"lines": [LINE]}}
    return {"device": {"id": "dev1"}, "mqtt": {"host": "127.0.0.1"}, "cameras": [camera], **sections}


def _readings() -> Readings:
    return Readings(node={"Model/Version": (DataType.String, "base")},
                    devices={"hall": {"State": (DataType.String, "streaming")}})


def test_a_sparkplug_change_restarts_the_node_alone_with_the_next_bd_seq(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "broker").start()
    sub = SparkplugSubscriber(broker)
    mqtt = {"host": broker.host, "port": broker.port, "keepalive_s": 5, "backoff": {"initial_s": 0.1, "max_s": 0.5},
            "sparkplug": {"group_id": "plant1", "interval_s": 0.2}}
    old = AppConfig.model_validate(_doc(mqtt=mqtt))
    changed = copy.deepcopy(mqtt)
    changed["sparkplug"]["group_id"] = "plant2"
    new = AppConfig.model_validate(_doc(mqtt=changed))

    def make(config: MqttConfig) -> EdgeNode:
        return EdgeNode(config, _readings, tmp_path / "state")

    node: EdgeNode | None = make(old.mqtt).start()
    try:
        assert node is not None and node.wait_connected(20)
        plan = plan_reload(old, new)
        assert plan.sparkplug == ("mqtt.sparkplug.group_id",) and plan.needs_restart == ()
        errors: list[str] = []
        node, applied = restart_sparkplug(node, plan, old.mqtt, new.mqtt, make, errors.append)
        assert node is not None and node.wait_connected(20) and (applied, errors) == (plan, [])
        got = sub.wait_for(lambda ms: [m for m in ms if m.kind == "DBIRTH" and "/plant2/" in m.topic] and ms,
                           timeout_s=30, message="the node's births in its new group")
        deaths = [m.metrics["bdSeq"] for m in got if m.kind == "NDEATH" and "/plant1/" in m.topic]
        births = [(m.topic.split("/")[1], m.metrics["bdSeq"]) for m in got if m.kind == "NBIRTH"]
        assert deaths == [0] and births == [("plant1", 0), ("plant2", 1)], (deaths, births)
        assert [m.device for m in got if m.kind == "DBIRTH" and "/plant2/" in m.topic] == ["hall"]
    finally:
        if node is not None:
            node.stop()
        sub.stop()
        broker.stop()


async def _line_names(port: int, camera: str) -> list[str]:
    client = Client(f"opc.tcp://127.0.0.1:{port}/", timeout=10)
    client.set_user("plc")
    client.set_password("plc-password")
    async with client:
        ns = await client.get_namespace_index("urn:appliance:dev1")
        lines = await client.get_node(ua.NodeId(f"Cameras.{camera}.Lines", ns)).get_children()
        return sorted([(await n.read_browse_name()).Name for n in lines])


def test_an_opcua_server_restarts_alone_with_the_new_address_space(tmp_path: Path) -> None:
    from appliance.opcua.feed import Feed
    from appliance.supervisor.opcuasetup import start_opcua

    port, feed, users = free_port(), Feed(), tmp_path / "users"
    users.write_text(f"plc:reader:{hash_password('plc-password')}\n")
    users.chmod(0o600)
    section = {"host": "127.0.0.1", "port": port, "interval_s": 0.2, "halt_grace_s": 0, "users_file": str(users),
               "allow_unencrypted": True}
    old = AppConfig.model_validate(_doc(opcua=section))
    new_doc = _doc(opcua=section)
    yard = {**new_doc["cameras"][0], "id": "yard", "analytics": {"lines": [{**LINE, "name": "gate"}]}}
    new_doc["cameras"].append(yard)
    new = AppConfig.model_validate(new_doc)

    def make(config: AppConfig) -> Any:
        assert config.opcua is not None
        return start_opcua(config, config.opcua, tmp_path / "state", feed, boot_id="0" * 32,
                           summary=lambda: {}, phase=lambda: (True, False), reset_line=lambda c, n: False)

    server = make(old)
    try:
        plan = plan_reload(old, new)
        assert plan.opcua == ("cameras",)
        errors: list[str] = []
        server, applied = restart_opcua(server, plan, old, new, make, errors.append)
        assert (applied, errors) == (plan, [])
        assert asyncio.run(_line_names(port, "yard")) == ["gate"]
    finally:
        if server is not None:
            server.stop()
