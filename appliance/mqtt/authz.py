"""Signed commands: the envelope, its canonical bytes, and the checks a state-changing command passes before its
handler runs (docs/mqtt.md, "Signed commands").

This package sits below ``ota``, so the Ed25519 check itself is a ``SignatureCheck`` the caller gives
(``appliance.ota.commandsig.signature_check``); the target, age and nonce checks are here, and age is judged when
the command *arrived*. Threading: the commands thread only, except ``refusals()`` (any thread, under the lock)."""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from appliance.mqtt.config import CommandsConfig
from appliance.mqtt.errors import REFUSAL_CODES, CommandRefused
from appliance.mqtt.nonces import NonceStore
from appliance.mqtt.topics import Topics

log = logging.getLogger(__name__)

DOMAIN = b"appliance-command-v1\n"
AUTH_VERSION = 1
# key id -> message -> signature: returns, or raises CommandRefused("unknown_key" | "bad_signature").
SignatureCheck = Callable[[str, bytes, bytes], None]

_NONCE = re.compile(r"^[0-9a-f]{32,64}$")
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")
_SIGNATURE = re.compile(r"^[A-Za-z0-9+/]{86}==$")  # base64 of 64 bytes
_FIELDS = {"v", "alg", "topic_prefix", "device_id", "command", "issued_at_ms", "nonce", "key_id", "signature"}


def canonical_json(doc: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8 (not \\u escapes), no NaN: the same bytes on the signer and the device."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def signed_bytes(request_id: Optional[str], args: Mapping[str, Any], auth: Mapping[str, Any]) -> bytes:
    """What the signature covers: everything in the command but the signature itself."""
    unsigned = {k: v for k, v in auth.items() if k != "signature"}
    return DOMAIN + canonical_json({"args": dict(args), "auth": unsigned, "request_id": request_id})


@dataclass(frozen=True)
class Authorization:
    """An accepted command: ``key_id`` and ``nonce`` of its signature (both None for an unsigned command where
    signatures are not required). A nonce the caller has answered already is accepted as it is: the caller sends
    its first reply again."""

    key_id: Optional[str] = None
    nonce: Optional[str] = None


@dataclass(frozen=True)
class Auth:
    topic_prefix: str
    device_id: str
    command: str
    issued_at_ms: int
    nonce: str
    key_id: str
    signature: bytes


def parse_auth(doc: Any) -> Auth:
    """The ``auth`` object, every field checked; a malformed one is ``bad_signature`` (it cannot be verified)."""
    def bad(why: str) -> CommandRefused:
        return CommandRefused("bad_signature", f"auth {why}; sign with appliance.ota.commandsig.sign_command "
                                               "or `appliance ota push --sign-key`")

    if not isinstance(doc, dict):
        raise bad(f"must be a JSON object, got {type(doc).__name__}")
    missing, unknown = sorted(_FIELDS - set(doc)), sorted(set(doc) - _FIELDS)
    if missing or unknown:
        raise bad(f"fields: missing {missing}, unknown {unknown}")
    if doc["v"] != AUTH_VERSION or doc["alg"] != "ed25519":
        raise bad(f"v must be {AUTH_VERSION} and alg 'ed25519', got {doc['v']!r}, {doc['alg']!r}")
    for name in ("topic_prefix", "device_id", "command"):
        if not isinstance(doc[name], str):
            raise bad(f"{name} must be a string")
    issued = doc["issued_at_ms"]
    if isinstance(issued, bool) or not isinstance(issued, int) or issued < 0:
        raise bad("issued_at_ms must be a non-negative integer (epoch milliseconds)")
    for name, pattern in (("nonce", _NONCE), ("key_id", _KEY_ID), ("signature", _SIGNATURE)):
        if not isinstance(doc[name], str) or not pattern.match(doc[name]):
            raise bad(f"{name} is malformed")
    return Auth(doc["topic_prefix"], doc["device_id"], doc["command"], issued, doc["nonce"], doc["key_id"],
                base64.b64decode(doc["signature"]))


class CommandAuthorizer:
    """``authorize(name, request_id, args, auth, received_at)`` before a state-changing command runs: returns its
    Authorization, else raises CommandRefused after logging it and counting it by code. ``received_at`` (epoch
    seconds) is when the command arrived: its age is judged then, not after it waited in the queue."""

    def __init__(self, config: CommandsConfig, topics: Topics, check: Optional[SignatureCheck],
                 nonces: NonceStore) -> None:
        self._config = config
        self._topics = topics
        self._check = check
        self._nonces = nonces
        self._opened = False
        self._lock = threading.Lock()
        self._refused = dict.fromkeys(REFUSAL_CODES, 0)

    def refusals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._refused)

    def close(self) -> None:
        self._nonces.close()

    def authorize(self, name: str, request_id: Optional[str], args: Mapping[str, Any], auth: Optional[Any],
                  received_at: float, answered: Callable[[str], bool] = lambda _nonce: False) -> Authorization:
        """``answered(nonce)``: True when the caller holds the reply to that nonce's command (a redelivery)."""
        try:
            return self._authorize(name, request_id, args, auth, int(received_at * 1000), answered)
        except CommandRefused as exc:
            with self._lock:
                self._refused[exc.code] += 1
            log.warning("MQTT command %s request_id=%s refused (%s): %s", name, request_id, exc.code, exc.message)
            raise

    def _authorize(self, name: str, request_id: Optional[str], args: Mapping[str, Any], auth_doc: Optional[Any],
                   now_ms: int, answered: Callable[[str], bool]) -> Authorization:
        if auth_doc is None:
            if not self._config.require_signature:
                return Authorization()
            raise CommandRefused("unsigned", f"command {name!r} changes what this device serves and needs an "
                                 "operator's signature (mqtt.commands.require_signature); sign it with "
                                 "`appliance ota push --sign-key KEYFILE` (docs/mqtt.md, \"Signed commands\")")
        auth = parse_auth(auth_doc)
        if self._check is None:
            raise CommandRefused("unknown_key", f"signed by key {auth.key_id}, but this device has no operator keys "
                                 "(mqtt.commands.operator_keys, else ota.trusted_keys)")
        self._check(auth.key_id, signed_bytes(request_id, args, auth_doc), auth.signature)
        want = (self._topics.prefix, self._topics.device_id, name)
        got = (auth.topic_prefix, auth.device_id, auth.command)
        if got != want:
            raise CommandRefused("wrong_target", "signed for {}/{} command {!r}, received as {}/{} command {!r}"
                                 .format(*got, *want))
        max_age_ms, skew_ms = int(self._config.max_age_s * 1000), int(self._config.clock_skew_s * 1000)
        age_ms = now_ms - auth.issued_at_ms
        # Valid while younger than the window; the nonce store forgets a nonce at the same instant (nonces.py).
        if age_ms >= max_age_ms + skew_ms:
            raise CommandRefused("expired", f"issued {age_ms / 1000:.0f} s ago; the limit is mqtt.commands.max_age_s "
                                 f"{self._config.max_age_s:g} s + clock_skew_s {self._config.clock_skew_s:g} s "
                                 "(send a new one; check both clocks if it was just made)")
        if -age_ms > skew_ms:
            raise CommandRefused("not_yet_valid", f"issued {-age_ms / 1000:.0f} s in the future by this device's "
                                 f"clock; the allowance is mqtt.commands.clock_skew_s {self._config.clock_skew_s:g} s "
                                 "(check the operator's and the device's clocks)")
        if not self._opened:
            self._nonces.open(now_ms, max_age_ms + skew_ms)
            self._opened = True
        if answered(auth.nonce):
            return Authorization(auth.key_id, auth.nonce)
        reset_ms = self._nonces.reset_ms
        if reset_ms is not None and auth.issued_at_ms <= reset_ms:
            raise CommandRefused("replayed", f"issued before {reset_ms / 1000:.0f} (epoch s), when this device's "
                                 "nonce store was found damaged and reset; it could be a replay of a command whose "
                                 "nonce was lost. Send a new one")
        if self._nonces.seen(auth.nonce, now_ms):
            raise CommandRefused("replayed", f"nonce {auth.nonce} was used before (a command runs once; "
                                 "send a new one)")
        # Spent before the handler runs: a crash during the handler leaves it spent, never reusable.
        self._nonces.add(auth.nonce, auth.issued_at_ms + max_age_ms + skew_ms, now_ms)
        return Authorization(auth.key_id, auth.nonce)
