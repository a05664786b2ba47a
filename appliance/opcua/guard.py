"""The server's own layer over asyncua's transport, so security holds whatever a client sends:

- a secure channel opens only with a security policy and mode the config offers, or as a None channel for
  discovery (GetEndpoints, FindServers: what a client asks before it picks an endpoint); anything else gets
  ``BadSecurityPolicyRejected`` or ``BadSecurityModeRejected``, a None channel's CreateSession included when
  None is not offered (asyncua alone serves any session on a None channel);
- every request after ActivateSession is checked against the ruleset with the session's user, whatever the
  channel (asyncua checks only on channels whose policy carries the ruleset); none is served before activation;
- the user name token policy of every endpoint names an encryption policy, so a password is encrypted with the
  server's certificate, not only by the channel.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any, cast

from asyncua import Server, ua
from asyncua.common.utils import ServiceError
from asyncua.crypto import uacrypto
from asyncua.crypto.permission_rules import PermissionRuleset
from asyncua.server.binary_server_asyncio import BinaryServer, OPCUAProtocol
from asyncua.server.internal_session import SessionState
from asyncua.server.uaprocessor import UaProcessor
from asyncua.ua.ua_binary import struct_from_binary, uatcp_to_binary

from appliance.errors import ApplianceError

log = logging.getLogger(__name__)
NONE_URI = "http://opcfoundation.org/UA/SecurityPolicy#None"


def _request(type_id: int) -> ua.NodeId:
    return ua.NodeId(cast(Any, type_id))


_DISCOVERY = frozenset(_request(t) for t in (
    ua.ObjectIds.FindServersRequest_Encoding_DefaultBinary, ua.ObjectIds.GetEndpointsRequest_Encoding_DefaultBinary))
_SESSIONLESS = _DISCOVERY | {_request(t) for t in (
    ua.ObjectIds.CreateSessionRequest_Encoding_DefaultBinary, ua.ObjectIds.CloseSessionRequest_Encoding_DefaultBinary,
    ua.ObjectIds.ActivateSessionRequest_Encoding_DefaultBinary)}


@dataclass(frozen=True)
class Guard:
    """What the config offers: (policy URI, mode) pairs, and the ruleset every request is checked against."""
    offered: frozenset[tuple[str, ua.MessageSecurityMode]]
    ruleset: PermissionRuleset

    @property
    def policies(self) -> frozenset[str]:
        return frozenset(uri for uri, _ in self.offered)


class _Refused(ApplianceError):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class GuardedProcessor(UaProcessor):
    """asyncua's per-connection processor with the channel and per-request checks of :class:`Guard`."""

    def __init__(self, iserver: Any, transport: Any, limits: Any, guard: Guard) -> None:
        super().__init__(iserver, transport, limits)
        self._guard = guard

    async def process(self, header: Any, body: Any) -> bool:
        try:
            if header.MessageType == ua.MessageType.SecureOpen and not self._connection.is_open():
                algorithm = struct_from_binary(ua.AsymmetricAlgorithmHeader, body.copy(header.body_size))
                if algorithm.SecurityPolicyURI not in self._guard.policies | {NONE_URI}:
                    raise _Refused(ua.StatusCodes.BadSecurityPolicyRejected,
                                   f"security policy {algorithm.SecurityPolicyURI} is not offered")
            return bool(await super().process(header, body))
        except _Refused as refused:
            log.warning("OPC UA: refused a secure channel from %s: %s", self.name, refused.reason)
            error = ua.ErrorMessage(ua.StatusCode(cast(Any, refused.code)), cast(Any, refused.reason))
            self._transport.write(uatcp_to_binary(cast(Any, ua.MessageType.Error), error))
            return False

    def open_secure_channel(self, algohdr: Any, seqhdr: Any, body: Any) -> None:
        if not self._connection.is_open():
            mode = struct_from_binary(ua.OpenSecureChannelRequest, body.copy()).Parameters.SecurityMode
            uri = algohdr.SecurityPolicyURI
            if (uri, mode) not in self._guard.offered | {(NONE_URI, ua.MessageSecurityMode.None_)}:
                raise _Refused(ua.StatusCodes.BadSecurityModeRejected,
                               f"security mode {mode.name} is not offered with {algohdr.SecurityPolicyURI}")
        super().open_secure_channel(algohdr, seqhdr, body)

    async def _process_message(self, typeid: Any, requesthdr: Any, seqhdr: Any, body: Any) -> Any:
        if typeid not in _DISCOVERY and self._connection.security_policy.URI not in self._guard.policies:
            log.warning("OPC UA: refused a request from %s on a %s channel (discovery only)", self.name,
                        self._connection.security_policy.URI)
            raise ServiceError(ua.StatusCodes.BadSecurityPolicyRejected)
        session = self.session
        if typeid not in _SESSIONLESS and session is not None:
            if session.state != SessionState.Activated:
                raise ServiceError(ua.StatusCodes.BadSessionNotActivated)
            if not self._guard.ruleset.check_validity(session.user, typeid, body):
                raise ua.uaerrors.BadUserAccessDenied
        return await super()._process_message(typeid, requesthdr, seqhdr, body)


class _GuardedProtocol(OPCUAProtocol):
    def __init__(self, guard: Guard, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._guard = guard

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if self.processor is not None:  # None: refused at max_connections
            self.processor = GuardedProcessor(self.iserver, self.transport, self.limits, self._guard)
            self.processor.set_policies(self.policies)


class _GuardedBinaryServer(BinaryServer):
    def __init__(self, guard: Guard, *args: Any) -> None:
        super().__init__(*args)
        self._guard = guard

    def _make_protocol(self) -> OPCUAProtocol:
        return _GuardedProtocol(self._guard, iserver=self.iserver, policies=self._policies, clients=self.clients,
                                closing_tasks=self.closing_tasks, limits=self.limits)


def encrypt_passwords(endpoints: list[ua.EndpointDescription]) -> None:
    """Each endpoint's user name token policy names its own policy (or, on a None endpoint, the first secured
    endpoint's), so clients encrypt the password with the server's certificate."""
    secured = [e.SecurityPolicyUri for e in endpoints if e.SecurityPolicyUri != NONE_URI]
    for endpoint in endpoints:
        uri = endpoint.SecurityPolicyUri if endpoint.SecurityPolicyUri != NONE_URI else secured[0]
        for token in endpoint.UserIdentityTokens:
            if token.TokenType == ua.UserTokenType.UserName:
                token.SecurityPolicyUri = uri


class GuardedServer(Server):
    """asyncua's Server whose connections go through :class:`GuardedProcessor`."""

    def __init__(self, guard: Guard, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._guard = guard

    async def start(self) -> None:
        """Server.start with the guarded transport, and password-encrypting token policies."""
        if self.iserver.certificate is not None:
            uacrypto.check_certificate(self.iserver.certificate, self._application_uri, socket.gethostname())
        await self._setup_server_nodes()
        encrypt_passwords(self.iserver.endpoints)
        await self.iserver.start()
        try:
            host, port = self._get_bind_socket_info()
            self.bserver = _GuardedBinaryServer(self._guard, self.iserver, host, port, self.limits)
            self.bserver.set_policies(self._policies)
            await self.bserver.start()
        except Exception:
            await self.iserver.stop()
            raise
