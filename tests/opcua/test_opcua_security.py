"""Security from the wire, with clients that ignore what the server offers: a channel forced to None (node-opcua
and asyncua) gets no session and resets nothing; a policy or mode not offered is refused at the channel; the
user name token policy makes clients encrypt the password; UserExecutable tells a reader the method is not
theirs; with an unencrypted endpoint offered, the roles still hold on it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asyncua import Client, ua
from asyncua.crypto.security_policies import SecurityPolicyAes128Sha256RsaOaep, SecurityPolicyBasic256Sha256
from support.opcua import ClientIdentity, Resets, client_identity, run_node_client, start_server, trust
from support.ports import free_port

from appliance.opcua.passwords import hash_password

NAMESPACE = "urn:appliance:dev1"
RESET = "Cameras.hall.Lines.door.ResetCounts"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, Resets, ClientIdentity]]:
    """One server with the default security settings, a reader ``plc`` and an operator ``lead``."""
    root = tmp_path_factory.mktemp("opcua-security")
    users = root / "users"
    users.write_text(f"lead:operator:{hash_password('lead-password')}\nplc:reader:{hash_password('plc-password')}\n")
    identity, resets, port = client_identity(root, "plc"), Resets(), free_port()
    trust(identity, root / "state" / "opcua" / "trusted")
    server = start_server(root / "state", port, resets, users_file=str(users))
    try:
        yield root, port, resets, identity
    finally:
        server.stop()


def _client(port: int, identity: ClientIdentity | None, user: str, password: str) -> Client:
    client = Client(f"opc.tcp://127.0.0.1:{port}/", timeout=10)
    if identity is not None:
        client.application_uri = identity.uri
    client.set_user(user)
    client.set_password(password)
    return client


async def _call_reset(client: Client) -> Any:
    async with client:
        ns = await client.get_namespace_index(NAMESPACE)
        door = client.get_node(ua.NodeId("Cameras.hall.Lines.door", ns))
        return await door.call_method(ua.NodeId(RESET, ns))


def test_a_forced_none_channel_from_node_opcua_gets_no_session_and_a_reader_resets_nothing(
        served: tuple[Path, int, Resets, ClientIdentity]) -> None:
    root, port, resets, identity = served
    for user, password in (("plc", "plc-password"), ("lead", "lead-password")):
        run = run_node_client(root / f"node-none-{user}", endpoint=f"opc.tcp://127.0.0.1:{port}/",
                              server_certificate=root / "state" / "opcua" / "server-cert.der", identity=identity,
                              policy="None", user=user, password=password, namespace=NAMESPACE, call=RESET)
        assert run.returncode == 2, run.output
        assert run.lines("connected") and not run.lines("session") and not run.lines("called"), run.output
        assert "BadSecurityPolicyRejected" in run.lines("refused")[0], run.output
    assert resets.calls == []
    run = run_node_client(root / "node-reader", endpoint=f"opc.tcp://127.0.0.1:{port}/",  # encrypted, as a reader
                          server_certificate=root / "state" / "opcua" / "server-cert.der", identity=identity,
                          policy="Basic256Sha256", user="plc", password="plc-password", namespace=NAMESPACE,
                          call=RESET)
    assert run.lines("session") and not run.lines("called"), run.output  # the Call service itself is refused
    assert "BadUserAccessDenied" in run.lines("refused")[0], run.output
    assert resets.calls == []


def test_a_forced_none_channel_from_asyncua_is_refused_and_discovery_shows_only_what_is_offered(
        served: tuple[Path, int, Resets, ClientIdentity]) -> None:
    _, port, resets, _ = served
    with pytest.raises(ua.uaerrors.BadSecurityPolicyRejected):
        asyncio.run(_call_reset(_client(port, None, "lead", "lead-password")))
    assert resets.calls == []
    endpoints = asyncio.run(_client(port, None, "", "").connect_and_get_server_endpoints())
    offered = {(e.SecurityPolicyUri, e.SecurityMode) for e in endpoints}
    assert offered == {(SecurityPolicyBasic256Sha256.URI, ua.MessageSecurityMode.SignAndEncrypt),
                       ("http://opcfoundation.org/UA/SecurityPolicy#Aes256_Sha256_RsaPss",
                        ua.MessageSecurityMode.SignAndEncrypt)}
    for endpoint in endpoints:  # the password is encrypted with the server's certificate, not only by the channel
        tokens = {t.TokenType: t.SecurityPolicyUri for t in endpoint.UserIdentityTokens}
        assert tokens[ua.UserTokenType.UserName] == endpoint.SecurityPolicyUri
        assert ua.UserTokenType.Anonymous not in tokens


@pytest.mark.parametrize("policy, mode, refusal", [
    (SecurityPolicyBasic256Sha256, ua.MessageSecurityMode.Sign, ua.uaerrors.BadSecurityModeRejected),
    (SecurityPolicyAes128Sha256RsaOaep, ua.MessageSecurityMode.SignAndEncrypt, ua.uaerrors.BadSecurityPolicyRejected),
])
def test_a_policy_or_mode_not_offered_is_refused_at_the_channel(
        served: tuple[Path, int, Resets, ClientIdentity], policy: Any, mode: ua.MessageSecurityMode,
        refusal: type[Exception]) -> None:
    root, port, resets, identity = served
    client = _client(port, identity, "lead", "lead-password")

    async def attempt() -> Any:
        await client.set_security(policy, certificate=str(identity.certificate),
                                  private_key=str(identity.private_key), mode=mode,
                                  server_certificate=str(root / "state" / "opcua" / "server-cert.der"))
        return await _call_reset(client)

    with pytest.raises(refusal):
        asyncio.run(attempt())
    assert resets.calls == []


async def _user_executable(port: int, identity: ClientIdentity, user: str, password: str) -> Any:
    client = _client(port, identity, user, password)
    await client.set_security(SecurityPolicyBasic256Sha256, certificate=str(identity.certificate),
                              private_key=str(identity.private_key), mode=ua.MessageSecurityMode.SignAndEncrypt)
    async with client:
        ns = await client.get_namespace_index(NAMESPACE)
        method = client.get_node(ua.NodeId(RESET, ns))
        executable = (await method.read_attribute(ua.AttributeIds.UserExecutable)).Value.Value
        counter = client.get_node(ua.NodeId("Cameras.hall.Lines.door.In", ns))
        access = (await counter.read_attribute(ua.AttributeIds.UserAccessLevel)).Value.Value
        return executable, access


def test_user_executable_and_user_access_level_tell_each_user_what_they_may_do(
        served: tuple[Path, int, Resets, ClientIdentity]) -> None:
    _, port, _, identity = served
    read_only = ua.AccessLevel.CurrentRead.mask
    assert asyncio.run(_user_executable(port, identity, "plc", "plc-password")) == (False, read_only)
    assert asyncio.run(_user_executable(port, identity, "lead", "lead-password")) == (True, read_only)


def test_on_an_offered_unencrypted_endpoint_a_reader_still_may_not_reset(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"lead:operator:{hash_password('lead-password')}\nplc:reader:{hash_password('plc-password')}\n")
    resets, port = Resets(), free_port()
    server = start_server(tmp_path / "state", port, resets, users_file=str(users), allow_unencrypted=True)
    try:
        with pytest.raises(ua.uaerrors.BadUserAccessDenied):
            asyncio.run(_call_reset(_client(port, None, "plc", "plc-password")))
        assert resets.calls == []
        assert asyncio.run(_call_reset(_client(port, None, "lead", "lead-password"))) is True
        assert resets.calls == [("hall", "door")]
    finally:
        server.stop()


async def _read_before_activating(port: int, identity: ClientIdentity, server_certificate: Path) -> Any:
    client = _client(port, identity, "lead", "lead-password")
    await client.set_security(SecurityPolicyBasic256Sha256, certificate=str(identity.certificate),
                              private_key=str(identity.private_key), server_certificate=str(server_certificate),
                              mode=ua.MessageSecurityMode.SignAndEncrypt)
    await client.connect_socket()
    try:
        await client.send_hello()
        await client.open_secure_channel()
        await client.create_session()  # and no ActivateSession
        return await client.nodes.server_state.read_value()
    finally:
        client.disconnect_socket()


def test_a_session_that_was_never_activated_is_served_nothing(
        served: tuple[Path, int, Resets, ClientIdentity]) -> None:
    root, port, _, identity = served
    with pytest.raises(ua.uaerrors.BadSessionNotActivated):
        asyncio.run(_read_before_activating(port, identity, root / "state" / "opcua" / "server-cert.der"))
