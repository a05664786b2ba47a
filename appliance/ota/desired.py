"""The signed desired state of a device group (``<prefix>/groups/<group>/ota/desired``, retained): which bundle the
group's devices should serve, and under which rollout id.

The Ed25519 signature covers the canonical JSON of every other field, the group included, so a publisher with
broker access can neither point a group at another bundle nor move a document onto another group's topic
(docs/fleet-rollout.md, "The desired state")."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from appliance.ota.errors import OtaRejected
from appliance.ota.signing import TrustedKeys

DOC_TYPE = "ota_desired"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = ("schema_version", "type", "group", "rollout_id", "version", "url", "sha256", "issued_at_ms",
           "expires_at_ms", "state", "signature")
_STATES = ("active", "stopped")


@dataclass(frozen=True)
class DesiredState:
    """What a group should serve. ``rollout_id`` names one rollout (the operator's run), ``version`` the bundle's
    manifest version, ``url`` where to download it, ``sha256`` its bytes' hash; epoch milliseconds
    ``issued_at_ms`` and ``expires_at_ms`` (a device ignores it from then on); ``state`` ``stopped``: the rollout
    of this version was stopped and no device should install it."""

    group: str
    rollout_id: str
    version: str
    url: str
    sha256: str
    issued_at_ms: int
    expires_at_ms: int
    state: str = "active"

    def expired(self, now: float) -> bool:
        return now * 1000 >= self.expires_at_ms

    def unsigned(self) -> dict[str, Any]:
        return {"schema_version": 1, "type": DOC_TYPE, **asdict(self)}


def canonical(fields: dict[str, Any]) -> bytes:
    """The bytes that are signed: sorted keys, no whitespace, ASCII (the same on every side)."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def parse_desired(raw: bytes, trusted: TrustedKeys, group: str) -> DesiredState:
    """Check the document's form, its signature and that it is meant for ``group``. Refusals are OtaRejected:
    ``corrupt`` (not a desired-state document), ``unsigned``, ``unknown_key``, ``bad_signature`` (as for bundles),
    ``invalid_manifest`` (signed, but for another group)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OtaRejected("corrupt", f"the desired state is not UTF-8 JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("type") != DOC_TYPE or doc.get("schema_version") != 1:
        raise OtaRejected("corrupt", f"not a desired-state document (type {DOC_TYPE!r}, schema_version 1)")
    unknown = sorted(set(doc) - set(_FIELDS))
    if unknown:
        raise OtaRejected("corrupt", f"the desired state has unknown keys {unknown}")
    signature = doc.pop("signature", None)
    if signature is None:
        raise OtaRejected("unsigned", "the desired state has no signature")
    if not isinstance(signature, dict):
        raise OtaRejected("corrupt", "the desired state's signature is not an object")
    try:
        state = DesiredState(**{k: doc[k] for k in _FIELDS if k not in ("schema_version", "type", "signature")})
    except KeyError as exc:
        raise OtaRejected("corrupt", f"the desired state has no {exc.args[0]!r}") from None
    _check_fields(state)
    trusted.verify(canonical(doc), json.dumps(signature).encode())
    if state.group != group:
        raise OtaRejected("invalid_manifest", f"the desired state is signed for group {state.group!r}, this device "
                                              f"is in {group!r} (a document copied onto another group's topic?)")
    return state


def _check_fields(state: DesiredState) -> None:
    for name in ("group", "rollout_id", "version"):
        value = getattr(state, name)
        if not isinstance(value, str) or not NAME.match(value):
            raise OtaRejected("corrupt", f"the desired state's {name} must be 1-64 of A-Z a-z 0-9 _ . -, "
                                         f"got {str(value)[:80]!r}")
    if not isinstance(state.url, str) or not re.match(r"^https?://\S+$", state.url):
        raise OtaRejected("corrupt", f"the desired state's url must be http(s)://..., got {str(state.url)[:80]!r}")
    if not isinstance(state.sha256, str) or not _SHA256.match(state.sha256):
        raise OtaRejected("corrupt", "the desired state's sha256 must be 64 lowercase hex digits")
    times = (state.issued_at_ms, state.expires_at_ms)
    if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in times) or times[1] <= times[0]:
        raise OtaRejected("corrupt", "the desired state's issued_at_ms and expires_at_ms must be epoch milliseconds, "
                                     "expiring after it was issued")
    if state.state not in _STATES:
        raise OtaRejected("corrupt", f"the desired state's state must be one of {_STATES}, got {state.state!r}")

