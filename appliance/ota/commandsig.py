"""Ed25519 for signed MQTT commands: ``sign_command`` for any CLI that sends one (``appliance ota push``, a fleet
rollout), ``signature_check`` for the device (the publisher calls it; appliance/mqtt/authz.py does the rest).

Keys are the bundle keys' kind (appliance/ota/signing.py): a command signature covers a domain string that no
manifest starts with, so one key may sign both without either signature serving as the other.
"""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any, Mapping, Optional

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.mqtt.authz import AUTH_VERSION, SignatureCheck, signed_bytes
from appliance.mqtt.errors import CommandRefused
from appliance.ota.signing import TrustedKeys, key_id


def sign_command(private_key: Ed25519PrivateKey, *, topic_prefix: str, device_id: str, command: str,
                 args: Mapping[str, Any], request_id: Optional[str] = None, now: Optional[float] = None,
                 nonce: Optional[str] = None) -> dict[str, Any]:
    """The whole command payload (``request_id``, ``args``, ``auth``) for <topic_prefix>/<device_id>/command/
    <command>, signed by ``private_key`` (``signing.load_private_key``), issued ``now`` (epoch seconds; default
    the current time) with a fresh random nonce."""
    public_raw = private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    issued_at_ms = int(round((time.time() if now is None else now) * 1000))
    auth: dict[str, Any] = {"v": AUTH_VERSION, "alg": "ed25519", "topic_prefix": topic_prefix, "device_id": device_id,
                            "command": command, "issued_at_ms": issued_at_ms,
                            "nonce": nonce or secrets.token_hex(16), "key_id": key_id(public_raw)}
    signature = private_key.sign(signed_bytes(request_id, args, auth))
    payload: dict[str, Any] = {"args": dict(args), "auth": {**auth, "signature": base64.b64encode(signature).decode()}}
    if request_id is not None:
        payload["request_id"] = request_id
    return payload


def signature_check(trusted: TrustedKeys) -> SignatureCheck:
    """``check(key_id, message, signature)`` against ``trusted``: raises CommandRefused unknown_key or
    bad_signature."""

    def check(kid: str, message: bytes, signature: bytes) -> None:
        key = trusted.keys.get(kid)
        if key is None:
            known = ", ".join(sorted(trusted.keys)) or "none configured"
            raise CommandRefused("unknown_key", f"signed by key {kid}, which is not an operator key here "
                                 f"(operator keys: {known}; mqtt.commands.operator_keys, else ota.trusted_keys)")
        try:
            key.verify(signature, message)
        except InvalidSignature:
            raise CommandRefused("bad_signature", f"the signature by key {kid} does not match the command (changed "
                                 "after signing, or signed for other args)") from None

    return check
