"""``opcua:``: the optional OPC UA server (docs/opcua.md). Absent: no server. Anonymous access and unencrypted
endpoints are off unless set here; every client session is read-only unless its user has the ``operator`` role."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from appliance.config.base import ConfigFieldError, StrictModel
from appliance.opcua.passwords import check_hash_format

Policy = Literal["Basic256Sha256", "Aes256Sha256RsaPss"]
Role = Literal["reader", "operator"]


class OpcUaUser(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$", description="the user name a client sends")
    password_hash: str = Field(description="password hash from `appliance password` (never the password)")
    role: Role = Field("reader", description="reader: browse, read, subscribe; operator: also call the methods")

    @field_validator("password_hash")
    @classmethod
    def _known_format(cls, value: str) -> str:
        check_hash_format(value)
        return value


class OpcUaConfig(StrictModel):
    host: str = Field("0.0.0.0", description="listen address (the PLC network's interface, or 0.0.0.0)")
    port: int = Field(4840, ge=1, le=65535, description="listen port (4840 is OPC UA's registered port)")
    security_policies: list[Policy] = Field(
        ["Basic256Sha256", "Aes256Sha256RsaPss"], min_length=1,
        description="endpoints offered, each with SignAndEncrypt only")
    allow_unencrypted: bool = Field(False, description="also offer an endpoint without security (a lab, never a "
                                                       "plant network): passwords then travel in clear")
    allow_anonymous: bool = Field(False, description="sessions without a user name or certificate, as reader")
    users: list[OpcUaUser] = Field([], description="user names with a password hash and a role")
    users_file: Optional[Path] = Field(None, description="more users, one `name:role:hash` a line (kept out of "
                                                         "the config file, e.g. mode 0600)")
    certificate: Optional[Path] = Field(None, description="the server's certificate (DER or PEM); none: one is "
                                                          "made on first start in <state_dir>/opcua/")
    private_key: Optional[Path] = Field(None, description="its private key (PEM); with `certificate` only")
    trusted_clients_dir: Optional[Path] = Field(None, description="client certificates trusted (DER or PEM "
                                                "files); none: <state_dir>/opcua/trusted")
    interval_s: float = Field(1.0, ge=0.1, le=3600, description="how often device and camera readings refresh; "
                                                                "counts and events follow each frame")
    counter_type: Literal["UInt32", "UInt64"] = Field(
        "UInt64", description="the counters' data type: UInt64 (a PLC's ULINT), or UInt32 (UDINT) for PLCs and HMIs "
                              "without 64-bit integers; UInt32 counters wrap to 0 after 4294967295")
    halt_grace_s: float = Field(1.0, ge=0, le=30, description="on stop, how long the state Halted is served "
                                                              "before the server closes, so subscribers see it")

    @model_validator(mode="after")
    def _cross_checks(self) -> OpcUaConfig:
        if (self.certificate is None) != (self.private_key is None):
            missing = "private_key" if self.private_key is None else "certificate"
            raise ConfigFieldError((missing,), "certificate and private_key go together: set both, or "
                                                        "neither to have one made on first start")
        names = [user.name for user in self.users]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise ConfigFieldError(("users", index, "name"), f"duplicate user {name!r}")
        if len(set(self.security_policies)) != len(self.security_policies):
            raise ConfigFieldError(("security_policies",), "a policy is listed twice")
        return self
