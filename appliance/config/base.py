"""The one base every config model inherits: unknown keys are errors, not silently ignored typos."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from appliance.errors import ApplianceError


class StrictModel(BaseModel):
    """Rejects unknown keys, validates defaults, and never coerces across types silently."""

    model_config = ConfigDict(extra="forbid", validate_default=True, str_strip_whitespace=True)


class ConfigFieldError(ApplianceError, ValueError):
    """Raised by cross-field checks so the error points at the key it is about, not at the section."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        self.path = path
        super().__init__(message)
