"""The ``web:`` section: who may use the operator's page when it is served beyond this machine (docs/ui.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from appliance.config.base import StrictModel

Role = Literal["viewer", "operator"]


class UserConfig(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$", description="login name")
    role: Role = Field(description="viewer: sees everything, edits nothing; operator: may also apply zones and lines")
    password_hash: str = Field(pattern=r"^scrypt\$", description="`appliance password` prints one "
                               "(scrypt; the password itself is never stored)")


class WebConfig(StrictModel):
    """Bound to loopback (``health.host``), the page needs no login; bound anywhere else, every page and API call
    of it needs one (``/metrics`` and ``/healthz`` stay as they are)."""

    enabled: bool = Field(True, description="serve the operator's page on the health endpoint's address")
    users: list[UserConfig] = Field(default_factory=list, description="who may log in")
    users_file: Optional[Path] = Field(None, description="more users: a YAML list of {name, role, password_hash}")
    session_s: float = Field(8 * 3600, ge=60, le=7 * 86400, description="a login lasts this long")
