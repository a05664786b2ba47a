"""The one base every config model inherits: unknown keys are errors, not silently ignored typos."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Rejects unknown keys, validates defaults, and never coerces across types silently."""

    model_config = ConfigDict(extra="forbid", validate_default=True, str_strip_whitespace=True)
