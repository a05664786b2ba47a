"""The OPC UA server on its own, as the appliance runs it (its thread, its loop) with readings given as plain
data, and asyncua's client: the certificate made on first start is kept across restarts, a client certificate
dropped into the trusted directory is accepted without a restart, and a users file's operator may call methods."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyAes256Sha256RsaPss
from support.opcua import ClientIdentity, Resets, client_identity, start_server, trust
from support.ports import free_port

from appliance.opcua.passwords import hash_password


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(f"lead:operator:{hash_password('lead-password')}\nplc:reader:{hash_password('plc-password')}\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "state"


async def _session(port: int, identity: ClientIdentity, user: str, password: str, check: Any) -> Any:
    client = Client(f"opc.tcp://127.0.0.1:{port}/", timeout=10)
    client.application_uri = identity.uri
    client.set_user(user)
    client.set_password(password)
    await client.set_security(SecurityPolicyAes256Sha256RsaPss, certificate=str(identity.certificate),
                              private_key=str(identity.private_key), mode=ua.MessageSecurityMode.SignAndEncrypt)
    async with client:
        return await check(client, await client.get_namespace_index("urn:appliance:dev1"))


async def _call_resets(client: Client, ns: int) -> list[Any]:
    door = client.get_node(ua.NodeId("Cameras.hall.Lines.door", ns))
    model = await client.get_node(ua.NodeId("Device.Model", ns)).read_value()
    return [model, await door.call_method(ua.NodeId("Cameras.hall.Lines.door.ResetCounts", ns))]


def test_a_users_file_operator_resets_a_line_and_a_reader_may_not(tmp_path: Path, state: Path,
                                                                   users_file: Path) -> None:
    identity, resets, port = client_identity(tmp_path, "plc"), Resets(), free_port()
    trust(identity, state / "opcua" / "trusted")
    server = start_server(state, port, resets, users_file=str(users_file))
    try:
        time.sleep(0.5)  # one readings interval: Device.Model is sampled
        assert asyncio.run(_session(port, identity, "lead", "lead-password", _call_resets)) == ["yolov3-tiny", True]
        assert resets.calls == [("hall", "door")]
        with pytest.raises(ua.uaerrors.BadUserAccessDenied):
            asyncio.run(_session(port, identity, "plc", "plc-password", _call_resets))
        assert resets.calls == [("hall", "door")]
    finally:
        server.stop()


async def _read_model(client: Client, ns: int) -> Any:
    return await client.get_node(ua.NodeId("Device.Model", ns)).read_value()


def test_the_server_certificate_is_kept_and_a_newly_trusted_client_needs_no_restart(
        tmp_path: Path, state: Path, users_file: Path) -> None:
    port = free_port()
    server = start_server(state, port, Resets(), users_file=str(users_file))
    made = (state / "opcua" / "server-cert.der").read_bytes()
    assert oct((state / "opcua" / "server-key.pem").stat().st_mode & 0o777) == "0o600"
    late = client_identity(tmp_path, "late")
    try:
        with pytest.raises(ua.uaerrors.BadCertificateUntrusted):
            asyncio.run(_session(port, late, "plc", "plc-password", _read_model))
        trust(late, state / "opcua" / "trusted")
        deadline = time.monotonic() + 10
        while True:  # the trusted directory is looked at every interval_s
            try:
                assert asyncio.run(_session(port, late, "plc", "plc-password", _read_model)) == "yolov3-tiny"
                break
            except ua.uaerrors.BadCertificateUntrusted:
                assert time.monotonic() < deadline, "the newly trusted certificate was never accepted"
                time.sleep(0.2)
    finally:
        server.stop()
    server = start_server(state, free_port(), Resets(), users_file=str(users_file))
    server.stop()
    assert (state / "opcua" / "server-cert.der").read_bytes() == made


async def _watch_states(port: int, identity: ClientIdentity, server: Any, started: list[bool]) -> dict[str, Any]:
    """CurrentState as a subscriber sees it while the appliance starts, runs and stops; what the state machine
    shows while Operational."""
    client = Client(f"opc.tcp://127.0.0.1:{port}/", timeout=10)
    client.application_uri = identity.uri
    client.set_user("plc")
    client.set_password("plc-password")
    await client.set_security(SecurityPolicyAes256Sha256RsaPss, certificate=str(identity.certificate),
                              private_key=str(identity.private_key), mode=ua.MessageSecurityMode.SignAndEncrypt)
    seen: list[str] = []

    class Handler:
        def datachange_notification(self, node: Any, value: Any, data: Any) -> None:
            seen.append(value.Text)

    async def until(state: str) -> None:
        for _ in range(100):
            if state in seen:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{state} never seen: {seen}")

    await client.connect()
    try:
        ns = await client.get_namespace_index("urn:appliance:dev1")
        machine = client.get_node(ua.NodeId("VisionSystem.VisionStateMachine", ns))
        subscription = await client.create_subscription(100, Handler())
        await subscription.subscribe_data_change(await machine.get_child("0:CurrentState"))
        await until("Preoperational")
        started[0] = True
        await until("Operational")
        last = await machine.get_child("0:LastTransition")
        shown = {"last": (await last.read_value()).Text,
                 "last_id": await client.get_node(await (await last.get_child("0:Id")).read_value()).read_browse_name(),
                 "states": [(await client.get_node(n).read_browse_name()).Name
                            for n in await (await machine.get_child("0:AvailableStates")).read_value()]}
        await asyncio.to_thread(server.stop)
        return {**shown, "seen": seen}
    finally:
        try:
            await client.disconnect()
        except Exception:  # the server is gone: nothing to close
            pass


def test_a_subscriber_sees_the_states_from_start_to_halted_on_stop(tmp_path: Path, state: Path,
                                                                   users_file: Path) -> None:
    identity, port, started = client_identity(tmp_path, "plc"), free_port(), [False]
    trust(identity, state / "opcua" / "trusted")
    server = start_server(state, port, Resets(), phase=lambda: (started[0], False), users_file=str(users_file),
                          halt_grace_s=1.0)
    try:
        shown = asyncio.run(_watch_states(port, identity, server, started))
    finally:
        server.stop()
    assert shown["seen"] == ["Preoperational", "Operational", "Halted"]
    assert shown["last"] == "PreoperationalToOperationalAuto" and shown["last_id"].Name == shown["last"]
    assert sorted(shown["states"]) == ["Error", "Halted", "Operational", "Preoperational"]


async def _read_door_in(client: Client, ns: int) -> Any:
    node = client.get_node(ua.NodeId("Cameras.hall.Lines.door.In", ns))
    for _ in range(100):  # the feed wakes the server, which writes within a moment
        value = await node.read_data_value()
        if value.Value.Value:
            return value.Value, await node.read_data_type()
        await asyncio.sleep(0.1)
    raise AssertionError("the counts never arrived")


def test_uint32_counters_for_plcs_without_64_bit_integers_wrap(tmp_path: Path, state: Path, users_file: Path) -> None:
    identity, port = client_identity(tmp_path, "plc"), free_port()
    trust(identity, state / "opcua" / "trusted")
    server = start_server(state, port, Resets(), users_file=str(users_file), counter_type="UInt32")
    try:
        server.feed.publish_counts("hall", 1, 0, {"lines": {"door": {"in": 2 ** 32 + 5, "out": 0}}})
        variant, data_type = asyncio.run(_session(port, identity, "plc", "plc-password", _read_door_in))
    finally:
        server.stop()
    assert (variant.Value, variant.VariantType) == (5, ua.VariantType.UInt32)
    assert data_type == ua.NodeId(ua.ObjectIds.UInt32)
