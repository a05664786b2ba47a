"""Errors of the OTA pipeline. Each rejection carries a stable ``code`` (for MQTT status, metrics labels) and a
human message naming what was wrong."""

from __future__ import annotations

import errno

from appliance.detector.serving.errors import ServingError
from appliance.errors import ApplianceError

REJECT_CODES = (
    "corrupt",          # not a readable bundle: bad tar, missing member, unsafe path, bad JSON
    "unsigned",         # no signature in the bundle
    "bad_signature",    # signature does not verify with the key it names
    "unknown_key",      # signed by a key that is not trusted on this device
    "hash_mismatch",    # a file's SHA-256 or size differs from the signed manifest
    "invalid_manifest", # the signed manifest fails validation
    "incompatible",     # appliance too old, input shape does not match the ONNX, ...
    "disk_full",        # not enough space to stage the bundle
    "too_large",        # over the configured bundle size limit
    "build_failed",     # the engine builder refused the model
    "golden_mismatch",  # golden frames not passed: detections outside tolerance, a frame unreadable or not run
    "load_failed",      # Triton could not load the new version
    "duplicate",        # this version is already installed
    "downgrade",        # not newer than the version floor (the newest ever active): an old bundle replayed
    "busy",             # another update holds the lock and the caller did not want to wait
    "delivery",         # the bundle could not be fetched (download, chunks, path)
    "internal",         # an unexpected error in the appliance; the message names it
    "interrupted",      # the appliance stopped (power cut, kill, restart) in the middle of the update
    "cancelled",        # a rollback came while the update was on its way; it stopped before becoming active
    "missing_classes",  # the model lacks a class the config's class filters name, and ota.require_classes is on
)


class OtaError(ApplianceError, RuntimeError):
    """Base of the OTA package's errors."""


class OtaRejected(OtaError):
    """The update was refused; nothing changed in what the appliance serves. ``code`` is one of REJECT_CODES;
    ``version``: the bundle's version, once known (ota/status reports it)."""

    def __init__(self, code: str, message: str, version: str | None = None) -> None:
        if code not in REJECT_CODES:
            raise ValueError(f"unknown rejection code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = message
        self.version = version


# What the serving layer's refusals are called on ota/status; a code not listed is an ``internal`` rejection.
_SERVING_TO_REJECT = {
    "load_failed": "load_failed",
}


def rejection_for(exc: ServingError) -> OtaRejected:
    """The rejection an update (or the start's load) ends with when the serving layer refused: same message."""
    code = _SERVING_TO_REJECT.get(exc.code)
    if code is None:
        return OtaRejected("internal", f"unexpected {type(exc).__name__}: {exc.message}")
    return OtaRejected(code, exc.message)


def out_of_space(exc: OSError) -> bool:
    """The filesystem (or the user's quota) is full: the update is refused as ``disk_full``."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


class RollbackError(OtaError):
    """A rollback was asked for but there is nothing complete and verified to roll back to."""
