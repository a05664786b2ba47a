"""The ``web:`` section: who may use the operator's page when it is served beyond this machine (docs/ui.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, model_validator

from appliance.config.base import ConfigFieldError, StrictModel

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
    session_s: float = Field(8 * 3600, ge=60, le=7 * 86400, description="a login lasts this long (the cookie's "
                             "Max-Age too)")
    tls_cert: Optional[Path] = Field(None, description="serve the health port over https with this certificate "
                                     "(PEM; the page, /healthz and /metrics alike); with tls_key")
    tls_key: Optional[Path] = Field(None, description="the certificate's private key (PEM)")
    hosts: list[str] = Field(default_factory=list, max_length=32, description="more names the page answers to "
                             "when bound to loopback (a reverse proxy's name); localhost, 127.0.0.1 and [::1] always")

    @model_validator(mode="after")
    def _tls_pair(self) -> "WebConfig":
        if (self.tls_cert is None) != (self.tls_key is None):
            missing = "tls_key" if self.tls_key is None else "tls_cert"
            raise ConfigFieldError((missing,), "https needs both tls_cert and tls_key")
        return self

    @property
    def tls(self) -> tuple[Path, Path] | None:
        return (self.tls_cert, self.tls_key) if self.tls_cert is not None and self.tls_key is not None else None
