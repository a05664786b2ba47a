"""Sign a device group's desired state for ``appliance ota rollout`` to publish; the device checks it with
:func:`appliance.ota.desired.parse_desired`, over the same canonical bytes."""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.ota.desired import DesiredState, canonical
from appliance.ota.signing import sign_manifest


def sign_desired(state: DesiredState, private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """The retained document for ``state``, signed with ``private_key``."""
    doc = state.unsigned()
    doc["signature"] = json.loads(sign_manifest(canonical(doc), private_key))
    return doc
