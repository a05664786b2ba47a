"""Errors of the serving layer. Each carries a stable ``code`` (for callers that map it: OTA turns it into its
own rejection code) and a human ``message`` naming what failed."""

from __future__ import annotations

from appliance.errors import ApplianceError

SERVING_CODES = (
    "load_failed",    # Triton could not load a model version (or it was not ready after loading)
    "route_changed",  # another version was routed meanwhile: the models asked about are not served any more
)


class ServingError(ApplianceError, RuntimeError):
    """A model could not be served as asked. ``code`` is one of SERVING_CODES."""

    def __init__(self, code: str, message: str) -> None:
        if code not in SERVING_CODES:
            raise ValueError(f"unknown serving error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message


class LoadFailed(ServingError):
    """Triton could not load a version; what it had loaded of it is unloaded again."""

    def __init__(self, message: str) -> None:
        super().__init__("load_failed", message)


class RouteChanged(ServingError):
    """Raised by a reload: another version was routed meanwhile (OTA); its models are not ours to reload."""

    def __init__(self, message: str) -> None:
        super().__init__("route_changed", message)
