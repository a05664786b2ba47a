"""OPC 40100 in form, checked by clients that know only the specification's NodeIds (those of the published
MachineVision NodeSet, written out here): the types, the VisionSystem's type and state, ResultReadyEventType
(i=1024) events with their mandatory fields received by a subscription on the Server object, and the Halt and
Reset methods answered (asyncua); the same NodeIds, events on the Server object and Halted on stop seen by a
second implementation (node-opcua)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyBasic256Sha256
from support.opcua import Resets, client_identity, start_node_client, start_server, trust
from support.ports import free_port

from appliance.events import Event
from appliance.opcua.passwords import hash_password

MV = "http://opcfoundation.org/UA/MachineVision"
EVENT = Event(event_id="ab" * 16, camera_id="hall", seq=7, event="cross", track_id=3, class_id=0,
              class_name="person", score=0.9, capture_time=1_700_000_000.0, frame_seq=70, image_width=768,
              image_height=576, line="door", zone=None, direction="in")


class Events:
    def __init__(self) -> None:
        self.received: list[Any] = []

    def event_notification(self, event: Any) -> None:
        self.received.append(event)


async def _as_a_client(port: int, identity: Any, server: Any) -> dict[str, Any]:
    client = Client(f"opc.tcp://127.0.0.1:{port}/", timeout=10)
    client.application_uri = identity.uri
    client.set_user("lead")
    client.set_password("lead-password")
    await client.set_security(SecurityPolicyBasic256Sha256, certificate=str(identity.certificate),
                              private_key=str(identity.private_key), mode=ua.MessageSecurityMode.SignAndEncrypt)
    async with client:
        await client.load_data_type_definitions()
        mv, ns = await client.get_namespace_index(MV), await client.get_namespace_index("urn:appliance:dev1")
        names = {i: (await client.get_node(ua.NodeId(i, mv)).read_browse_name()).Name
                 for i in (1003, 1017, 1024, 5028, 5031, 5254, 7093, 7094)}
        vision = client.get_node(ua.NodeId("VisionSystem", ns))
        type_id = await vision.read_type_definition()
        state_id = await client.get_node(ua.NodeId("VisionSystem.VisionStateMachine.CurrentState.Id", ns)).read_value()
        handler = Events()
        subscription = await client.create_subscription(100, handler)
        await subscription.subscribe_events(client.nodes.server, client.get_node(ua.NodeId(1024, mv)))
        server.feed.publish_events([EVENT])
        for _ in range(100):
            if handler.received:
                break
            await asyncio.sleep(0.1)
        machine = client.get_node(ua.NodeId("VisionSystem.VisionStateMachine", ns))
        answers = []
        for method in ("Halt", "Reset"):
            try:
                await machine.call_method(f"{mv}:{method}")
                answers.append("Good")
            except ua.UaStatusCodeError as exc:
                answers.append(type(exc).__name__)
        return {"names": names, "type": type_id, "mv": mv, "state": state_id, "events": handler.received,
                "answers": answers}


def test_a_client_finds_the_specifications_nodeids_and_gets_result_ready_events_on_the_server_object(
        tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"lead:operator:{hash_password('lead-password')}\n")
    identity, port = client_identity(tmp_path, "mes"), free_port()
    trust(identity, tmp_path / "state" / "opcua" / "trusted")
    server = start_server(tmp_path / "state", port, Resets(), users_file=str(users))
    try:
        seen = asyncio.run(_as_a_client(port, identity, server))
    finally:
        server.stop()
    mv = seen["mv"]
    assert seen["names"] == {1003: "VisionSystemType", 1017: "VisionStateMachineType", 1024: "ResultReadyEventType",
                             5028: "Preoperational", 5031: "Operational", 5254: "PreoperationalToOperationalAuto",
                             7093: "Reset", 7094: "Halt"}
    assert seen["type"] == ua.NodeId(1003, mv) and seen["state"] == ua.NodeId(5031, mv)  # Operational
    [event] = seen["events"]  # the Server object is a notifier of the VisionSystem
    assert event.EventType == ua.NodeId(1024, mv)
    assert (event.ResultId.Id, event.IsPartial, event.ResultState, event.JobId.Id) == (EVENT.event_id, False, 1,
                                                                                       "0" * 32)
    assert event.CreationTime is not None and event.InternalRecipeId.Id == "yolov3-tiny"
    assert event.InternalConfigurationId.Id == "dev1"
    assert json.loads(event.ResultContent[0]) == {"camera": "hall", "event": "cross", "seq": 7, "track_id": 3,
                                                  "class_name": "person", "zone": None, "line": "door",
                                                  "direction": "in"}
    assert seen["answers"] == ["BadNotSupported", "BadNotSupported"]  # stopped by its service; recovers by itself


def _lines_until(client: subprocess.Popen[str], prefix: str, seen: list[str]) -> str:
    assert client.stdout is not None
    for line in client.stdout:
        seen.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return line.removeprefix(prefix).strip()
    raise AssertionError(f"the node-opcua client ended before {prefix!r}:\n" + "\n".join(seen))


def test_node_opcua_reads_the_specifications_nodeids_gets_events_on_the_server_object_and_sees_halted(
        tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"plc:reader:{hash_password('plc-password')}\n")
    identity, port = client_identity(tmp_path, "scada"), free_port()
    trust(identity, tmp_path / "state" / "opcua" / "trusted")
    server = start_server(tmp_path / "state", port, Resets(), users_file=str(users), halt_grace_s=1.0)
    client = start_node_client(tmp_path / "node", endpoint=f"opc.tcp://127.0.0.1:{port}/",
                               server_certificate=tmp_path / "state" / "opcua" / "server-cert.der",
                               identity=identity, policy="Basic256Sha256", user="plc", password="plc-password",
                               namespace="urn:appliance:dev1", specIds=[1003, 1017, 1024, 5029, 7094],
                               timeoutMs=20000)
    seen: list[str] = []
    try:
        _lines_until(client, "subscribed: ", seen)
        server.feed.publish_events([EVENT])
        event = json.loads(_lines_until(client, "event: ", seen))
        assert _lines_until(client, "state: ", seen) == "Operational"
        server.stop()
        assert _lines_until(client, "state: ", seen) == "Halted"
    finally:
        server.stop()
        client.kill()
        client.wait(10)
    assert [line for line in seen if line.startswith("spec: ")] == [
        "spec: 1003 VisionSystemType", "spec: 1017 VisionStateMachineType", "spec: 1024 ResultReadyEventType",
        "spec: 5029 Halted", "spec: 7094 Halt"]
    assert event["SourceName"] == "VisionSystem" and event["IsPartial"] is False and event["ResultState"] == 1
    assert event["ResultId"]["id"] == EVENT.event_id and event["JobId"]["id"] == "0" * 32
