"""Who may open a session and what a session may do: users by password hash or by a trusted client
certificate, and a ruleset under which every session reads, browses and subscribes, only a user with the
``operator`` role calls methods, and nobody writes or changes the address space.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, cast

from asyncua import ua
from asyncua.crypto.permission_rules import USER_TYPES, PermissionRuleset, User, UserRole
from asyncua.crypto.truststore import TrustStore
from cryptography import x509

from appliance.opcua.passwords import UserEntry, verify_password

log = logging.getLogger(__name__)
ANONYMOUS = "anonymous"


def _request(type_id: int) -> ua.NodeId:
    return ua.NodeId(cast(Any, type_id))


_CALL = _request(ua.ObjectIds.CallRequest_Encoding_DefaultBinary)
_READ_ONLY = {_request(t) for t in USER_TYPES} - {_CALL, _request(ua.ObjectIds.WriteRequest_Encoding_DefaultBinary)}


class ApplianceUsers:
    """asyncua's user manager: a User named after the account (``anonymous``, a user name, or ``cert:<CN>``)
    with role ``User``; None refuses the session (BadUserAccessDenied)."""

    def __init__(self, users: Iterable[UserEntry], *, allow_anonymous: bool, trust: TrustStore | None) -> None:
        self._users = {user.name: user for user in users}
        self._anonymous, self._trust = allow_anonymous, trust
        self.operators = {user.name for user in self._users.values() if user.role == "operator"}

    def get_user(self, iserver: Any, username: str | None = None, password: str | None = None,
                 certificate: Any = None) -> User | None:
        if username is None and certificate is not None:
            return self._by_certificate(certificate)
        if username is None:
            return User(role=UserRole.User, name=ANONYMOUS) if self._anonymous else None
        entry = self._users.get(username)
        if entry is None or password is None or not verify_password(password, entry.password_hash):
            log.warning("OPC UA: refused user %r (unknown user or wrong password)", username)
            return None
        return User(role=UserRole.User, name=username)

    def _by_certificate(self, certificate: bytes) -> User | None:
        """A certificate as the identity (X509 token; asyncua also passes the channel's certificate with an
        anonymous token): trusted ones read, as ``cert:<subject>``; they never call methods."""
        cert = x509.load_der_x509_certificate(certificate)
        subject = cert.subject.rfc4514_string()
        if self._trust is None or not self._trust.is_trusted(cert):
            log.warning("OPC UA: refused user certificate %s (not in the trusted clients' directory)", subject)
            return None
        return User(role=UserRole.User, name=f"cert:{subject}")


class ReadOnlyUnlessOperator(PermissionRuleset):
    """Read, browse, subscribe for every session; Call for operators; Write and node management for none."""

    def __init__(self, operators: set[str]) -> None:
        self._operators = operators

    def check_validity(self, user: User, action_type_id: ua.NodeId, body: Any) -> bool:
        if action_type_id in _READ_ONLY:
            return True
        return action_type_id == _CALL and getattr(user, "name", None) in self._operators


def user_executable(operators: set[str]) -> Any:
    """A PostRead callback: a method's UserExecutable is False for every user who may not call methods, so an
    HMI greys its button (the ruleset refuses the call whatever it shows)."""
    def post_read(event: Any, _dispatcher: Any) -> None:
        if not event.is_external or getattr(event.user, "name", None) in operators:
            return
        for index, item in enumerate(event.request_params.NodesToRead):
            if item.AttributeId == ua.AttributeIds.UserExecutable and event.response_params[index].StatusCode.is_good():
                event.response_params[index] = ua.DataValue(ua.Variant(False, ua.VariantType.Boolean))
    return post_read
