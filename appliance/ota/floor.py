"""The anti-rollback version floor: only a version newer than any this device has served installs.

The floor is the newest version ever made active (kept by ``OtaStore``); going back to a kept version is
``OtaManager.rollback()``, which the floor does not limit.
"""

from __future__ import annotations

import logging

from appliance.ota.errors import OtaRejected
from appliance.ota.manifest import Manifest, version_order
from appliance.ota.store import OtaStore

log = logging.getLogger(__name__)


def version_floor(store: OtaStore) -> str | None:
    """The newest version ever made active (also the active one, should a power cut have come between moving
    the pointer and raising the floor). Raises ``ValueError`` for a damaged floor file."""
    floor, active = store.read_floor(), store.read_pointer().version
    candidates = [v for v in (floor, active) if v is not None and version_order(v) is not None]
    return max(candidates, key=lambda v: version_order(v) or ()) if candidates else None


def check_floor(store: OtaStore, m: Manifest) -> None:
    """Refuse ``m`` unless it is newer than the floor: a captured old bundle, validly signed, must not be
    replayed onto the device."""
    order = version_order(m.version)
    if order is None:
        raise OtaRejected("invalid_manifest", f"version {m.version!r} cannot be ordered: bundle versions are "
                                              "dotted numbers (7, 2.1, 2024.05.1), each newer than the last")
    try:
        floor = version_floor(store)
    except ValueError as exc:  # a damaged floor file: refuse rather than let an old bundle in
        raise OtaRejected("downgrade", f"{exc}; no update installs until it is fixed") from None
    if floor is not None and order <= (version_order(floor) or ()):
        raise OtaRejected("downgrade", f"version {m.version} is not newer than {floor}, the newest version this "
                                       "device has served (a replayed old bundle?); go back to a kept version with "
                                       "the rollback action, or ship the fix with a higher version")


def raise_floor(store: OtaStore, version: str) -> None:
    """After the pointer moved: the floor follows (version_floor() also counts the active version, so a floor
    that cannot be written is logged, not a failed update)."""
    try:
        store.raise_floor(version)
    except (OSError, ValueError) as exc:
        log.error("OTA: could not raise the version floor to %s in %s: %s", version, store.root, exc)
