"""The one error type for input a stage refuses; ``reason`` is a short stable label for metrics."""

from __future__ import annotations

from appliance.errors import ApplianceError


class InputRejected(ApplianceError, ValueError):
    """A frame or tensor the stage will not process. ``reason`` labels the rejected-inputs metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
