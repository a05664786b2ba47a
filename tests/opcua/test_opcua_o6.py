"""A client from a third OPC UA stack, open62541 (the ``o6`` package, tests/opcua/o6client, in its own virtualenv),
against one server for the whole module: it signs in over Basic256Sha256/SignAndEncrypt with a password; pinning
the encrypted endpoint's description over a forced None channel it gets no session and resets nothing; a reader's
ResetCounts is refused and an operator's works; it reads OPC 40100's NodeIds; it receives a ResultReadyEventType
event with its mandatory fields through a subscription on the Server object, and sees Halted on stop (the last
test: it stops the module's server)."""

from __future__ import annotations

import json
import struct
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.opcua import (
    ClientIdentity,
    Resets,
    client_identity,
    o6_steps,
    run_o6_client,
    start_o6_client,
    start_server,
    trust,
)
from support.ports import free_port

from appliance.events import Event
from appliance.opcua.passwords import hash_password

MV = "http://opcfoundation.org/UA/MachineVision"
NAMESPACE = "urn:appliance:dev1"
RESET = "Cameras.hall.Lines.door.ResetCounts"
BASIC256SHA256 = "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256"
SIGN_AND_ENCRYPT = 3
EVENT = Event(event_id="cd" * 16, camera_id="hall", seq=9, event="cross", track_id=4, class_id=0,
              class_name="person", score=0.8, capture_time=1_700_000_000.0, frame_seq=90, image_width=768,
              image_height=576, line="door", zone=None, direction="out")
READER = {"user": "plc", "password": "plc-password"}
OPERATOR = {"user": "lead", "password": "lead-password"}


class Served:
    def __init__(self, root: Path, port: int, resets: Resets, identity: ClientIdentity, server: Any) -> None:
        self.root, self.port, self.resets, self.identity, self.server = root, port, resets, identity, server

    def client_options(self, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        return {"endpoint": f"opc.tcp://127.0.0.1:{self.port}/", "identity": self.identity, "namespace": NAMESPACE,
                "server_certificate": self.root / "state" / "opcua" / "server-cert.der", "sessions": sessions}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The server with the default security settings, a reader ``plc`` and an operator ``lead``; Halted is kept
    for a second on stop, as the appliance keeps it."""
    root = tmp_path_factory.mktemp("opcua-o6")
    (root / "users").write_text(f"lead:operator:{hash_password('lead-password')}\n"
                                f"plc:reader:{hash_password('plc-password')}\n")
    identity, resets, port = client_identity(root, "o6"), Resets(), free_port()
    trust(identity, root / "state" / "opcua" / "trusted")
    server = start_server(root / "state", port, resets, users_file=str(root / "users"), halt_grace_s=1.0)
    try:
        yield Served(root, port, resets, identity, server)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def sessions(served: Served) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """One o6 process, four sessions in this order: a reader over encryption calls ResetCounts (and discovers the
    endpoints), a reader and an operator each pin the encrypted endpoint's description on a forced None channel and
    call it, then an operator over encryption calls it and reads the specification's NodeIds. Its steps, and the
    resets the server made."""
    returncode, steps, output = run_o6_client(served.root / "o6-sessions", **served.client_options([
        {**READER, "channel": "encrypted", "call": RESET},
        {**READER, "channel": "forced-none", "call": RESET},
        {**OPERATOR, "channel": "forced-none", "call": RESET},
        {**OPERATOR, "channel": "encrypted", "call": RESET, "specIds": [1003, 1017, 1024, 5029, 7093, 7094]},
    ]))
    assert returncode == 0 and steps[-1]["step"] == "done", output
    return steps, list(served.resets.calls)


def _of(steps: list[dict[str, Any]], step: str, **fields: Any) -> list[dict[str, Any]]:
    return [s for s in steps if s["step"] == step and all(s.get(k) == v for k, v in fields.items())]


def test_o6_signs_in_over_basic256sha256_with_a_password_and_reads_the_specifications_nodeids(
        sessions: tuple[list[dict[str, Any]], list[tuple[str, str]]]) -> None:
    steps, _ = sessions
    signed_in = _of(steps, "session", channel="encrypted")
    assert [s["user"] for s in signed_in] == ["plc", "lead"], steps
    assert all((s["policy"], s["mode"]) == (BASIC256SHA256, SIGN_AND_ENCRYPT) for s in signed_in), steps
    assert {s["id"]: s["name"] for s in _of(steps, "spec")} == {
        1003: "VisionSystemType", 1017: "VisionStateMachineType", 1024: "ResultReadyEventType", 5029: "Halted",
        7093: "Reset", 7094: "Halt"}
    assert _of(steps, "state-id") == [{"step": "state-id", "ns": MV, "id": 5031}]  # Operational


def test_o6_on_a_forced_none_channel_gets_no_session_and_nothing_is_reset(
        sessions: tuple[list[dict[str, Any]], list[tuple[str, str]]]) -> None:
    steps, resets = sessions
    assert [(s["policy"], s["mode"]) for s in _of(steps, "pinned")] == [(BASIC256SHA256, SIGN_AND_ENCRYPT)] * 2
    assert [(s["user"], s["status"]) for s in _of(steps, "refused")] == [
        ("plc", "BAD_SECURITY_POLICY_REJECTED"), ("lead", "BAD_SECURITY_POLICY_REJECTED")], steps
    assert not [s for s in steps if s.get("channel") == "forced-none" and s["step"] != "refused"], steps
    assert resets == [("hall", "door")]  # the operator's encrypted call, the last session's; nothing before it


def test_o6_a_readers_reset_counts_is_refused_and_an_operators_works(
        sessions: tuple[list[dict[str, Any]], list[tuple[str, str]]]) -> None:
    steps, resets = sessions
    assert _of(steps, "call-refused") == [{"step": "call-refused", "user": "plc", "channel": "encrypted",
                                           "status": "BAD_USER_ACCESS_DENIED"}]
    assert _of(steps, "called") == [{"step": "called", "user": "lead", "channel": "encrypted", "status": "GOOD",
                                     "outputs": [True]}]
    assert resets == [("hall", "door")]


def _ua_string(text: str) -> str:
    """``text`` as OPC UA binary encodes a String (Int32 length, UTF-8), in hex: an undecoded structure's body."""
    data = text.encode()
    return (struct.pack("<i", len(data)) + data).hex()


def _until(client: subprocess.Popen[str], seen: list[dict[str, Any]], *wanted: tuple[str, Any]) -> None:
    """Read the client's steps into ``seen`` until each (step, value) in ``wanted`` came, in any order (a value
    of None: any); fail on the client's error or timeout, or its end."""
    assert client.stdout is not None
    missing, output = list(wanted), []
    for line in client.stdout:
        output.append(line.rstrip("\n"))
        for step in o6_steps(line):
            seen.append(step)
            assert step["step"] not in ("error", "timeout"), "\n".join(output)
            missing = [(name, value) for name, value in missing
                       if not (step["step"] == name and value in (None, step.get("value")))]
        if not missing:
            return
    raise AssertionError(f"the o6 client ended before {missing}:\n" + "\n".join(output))


def test_o6_gets_result_ready_events_on_the_server_object_and_sees_halted_on_stop(served: Served) -> None:
    client = start_o6_client(served.root / "o6-watch", **served.client_options([
        {**READER, "channel": "encrypted", "watch": 30}]))
    seen: list[dict[str, Any]] = []
    try:
        _until(client, seen, ("subscribed", None))
        served.server.feed.publish_events([EVENT])
        _until(client, seen, ("event", None), ("state", "Operational"))
        served.server.stop()  # the module's server: this test is the module's last
        _until(client, seen, ("state", "Halted"))
        assert client.wait(30) == 0
    finally:
        client.kill()
        client.wait(10)
    [event] = [step for step in seen if step["step"] == "event"]
    assert (event["EventType"], event["SourceName"]) == ({"ns": MV, "id": 1024}, "VisionSystem")
    assert (event["IsPartial"], event["ResultState"]) == (False, 1)
    # Each structure is typed by the NodeSet's "Default Binary" encoding NodeId, the type id o6 looks up.
    assert [event[name]["typeId"] for name in ("ResultId", "JobId", "InternalRecipeId", "InternalConfigurationId")
            ] == [{"ns": MV, "id": 5274}, {"ns": MV, "id": 5008}, {"ns": MV, "id": 5268}, {"ns": MV, "id": 5090}]
    assert event["ResultId"]["body"] == _ua_string(EVENT.event_id)  # ResultIdDataType.Id: the event id
    assert event["JobId"]["body"] == _ua_string("0" * 32)  # the boot id
    assert _ua_string("yolov3-tiny") in event["InternalRecipeId"]["body"]  # the served model
    assert _ua_string("dev1") in event["InternalConfigurationId"]["body"]  # the device
    assert datetime.fromisoformat(event["CreationTime"].replace("Z", "+00:00")).year >= 2024
    assert json.loads(event["ResultContent"][0]) == {"camera": "hall", "event": "cross", "seq": 9, "track_id": 4,
                                                     "class_name": "person", "zone": None, "line": "door",
                                                     "direction": "out"}
