"""MQTT section of the appliance config: broker, security, QoS per message class, spool bounds, publish modes.

Secrets: ``password`` may come from the environment through the YAML loader's ``${NAME}`` expansion, or from a
file (``password_file``, e.g. a systemd credential) so it never sits in the config itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field, SecretStr, field_validator, model_validator

from appliance.backoff import BackoffConfig as BaseBackoffConfig
from appliance.config.base import ConfigFieldError, StrictModel
from appliance.config.ids import ID_PATTERN, Id  # noqa: F401 (ID_PATTERN: re-exported)
from appliance.mqtt.sparkplugconfig import SparkplugConfig

QoS = Literal[0, 1, 2]

PREFIX_PATTERN = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$"


@dataclass(frozen=True)
class Broker:
    """One broker to connect to: where the session is (or tries to be) now."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class BrokerAddress(StrictModel):
    """One entry of ``mqtt.hosts``: ``host``, ``host:port``, ``[ipv6]:port``, or a mapping {host, port}."""

    host: str = Field(..., min_length=1, max_length=253, description="broker host name or address")
    port: Optional[int] = Field(None, ge=1, le=65535, description="broker port; None: mqtt.port")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            return parse_host_port(data)
        return data

    @field_validator("host")
    @classmethod
    def _plain_host(cls, host: str) -> str:
        if "://" in host:
            raise ValueError(f"{host!r}: write the broker as host or host:port, without a scheme")
        if any(c.isspace() or c in "/[]@" for c in host):
            raise ValueError(f"{host!r} is not a host name or address")
        return host


def parse_host_port(text: str) -> dict[str, Any]:
    """``host``, ``host:port``, ``[ipv6]`` or ``[ipv6]:port`` as {host, port}; ValueError says what is wrong."""
    text = text.strip()
    if not text:
        raise ValueError("an empty broker address; write host or host:port")
    if "://" in text:
        raise ValueError(f"{text!r}: write the broker as host or host:port, without a scheme")
    port_text: Optional[str] = None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: an IPv6 address is written [address] or [address]:port")
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        raise ValueError(f"{text!r}: an IPv6 address is written in brackets, [address] or [address]:port")
    else:
        host, colon, port_text_or_empty = text.partition(":")
        port_text = port_text_or_empty if colon else None
    if port_text is None:
        return {"host": host}
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535, not {port_text!r}")
    return {"host": host, "port": int(port_text)}


class TlsConfig(StrictModel):
    """TLS towards the broker. The server certificate is always verified (against ``ca`` or the system store)."""

    ca: Optional[Path] = Field(None,
                               description="CA bundle (PEM) that signed the broker certificate; None: system store")
    cert: Optional[Path] = Field(None, description="client certificate (PEM) for mutual TLS; needs `key`")
    key: Optional[Path] = Field(None, description="private key (PEM, unencrypted) of the client certificate")
    check_hostname: bool = Field(True, description="verify that the broker certificate names the host connected "
                                 "to (each entry of `hosts` in turn)")

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> "TlsConfig":
        if (self.cert is None) != (self.key is None):
            raise ValueError("tls.cert and tls.key must be given together (mutual TLS needs both)")
        return self


class QosConfig(StrictModel):
    """QoS per message class. Detections default to 1: the spool deletes a message only on PUBACK."""

    detections: QoS = Field(1, description="per-camera detections (spooled; 0 means best effort once sent)")
    status: QoS = Field(1, description="retained device and camera status, and a camera's retained counts and snapshot")
    events: QoS = Field(1, description="analytics events (spooled like detections; docs/analytics.md)")
    health: QoS = Field(0, description="periodic health (the next one supersedes a lost one)")
    commands: QoS = Field(1, description="subscription QoS for command topics")
    replies: QoS = Field(1, description="command replies")


class BackoffConfig(BaseBackoffConfig):
    """Reconnect delay: initial_s * factor**attempt, capped at max_s, +/- jitter (a fraction), never above max_s.

    ``factor`` was called ``multiplier`` here; the old name is still accepted, with a deprecation warning."""

    jitter_within_max: ClassVar[bool] = True

    initial_s: float = Field(1.0, gt=0, le=300, description="delay before the first retry")
    max_s: float = Field(60.0, gt=0, le=3600, description="upper bound on the delay")
    factor: float = Field(2.0, ge=1.0, le=10.0, description="growth per failed attempt (formerly `multiplier`)")
    jitter: float = Field(0.2, ge=0.0, le=0.5, description="random spread, fraction of the delay, so a fleet does "
                          "not reconnect in lockstep after a broker restart")


class SpoolConfig(StrictModel):
    """On-disk queue of detections awaiting a broker acknowledgement (SQLite, WAL)."""

    path: Optional[Path] = Field(None, description="spool file; None: <state dir>/mqtt-spool.sqlite3 "
                                 "(the supervisor resolves it)")
    max_bytes: int = Field(256 * 1024 * 1024, ge=64 * 1024, le=64 * 1024**3,
                           description="bound on the queued payload+topic bytes")
    max_age_s: float = Field(7 * 24 * 3600.0, gt=0, description="messages older than this are dropped and counted")
    overflow: Literal["drop_oldest", "drop_newest", "block"] = Field(
        "drop_oldest", description="when full: drop the oldest queued message, refuse the new one, or block the "
        "caller up to block_timeout_s and then refuse")
    block_timeout_s: float = Field(1.0, ge=0, le=600, description="longest a publish call blocks under 'block'")
    memory_bytes: int = Field(4 * 1024 * 1024, ge=16 * 1024, le=1024**3, description=(
        "per camera: results held in memory while the spool cannot be written (a full disk); past it the camera's "
        "oldest detections are dropped first, counted and announced by a gap record"))
    synchronous: Literal["normal", "full"] = Field(
        "normal", description="normal: a returned publish survives a process crash (SIGKILL, OOM); full: also a "
        "power cut (fsync per commit, slower)")


class PublishConfig(StrictModel):
    """When a camera's detections are published."""

    mode: Literal["every_frame", "on_change", "fixed_rate"] = Field(
        "every_frame", description="every frame; only when the class counts change; or at most rate_hz")
    rate_hz: Optional[float] = Field(None, gt=0, le=1000, description="fixed_rate only: messages per second")
    min_score: float = Field(0.0, ge=0, le=1, description="on_change only: ignore detections below this score")
    heartbeat_s: Optional[float] = Field(None, gt=0, le=86400,
                                         description="on_change only: publish unchanged results at least this often")

    @model_validator(mode="after")
    def _mode_fields(self) -> "PublishConfig":
        if self.mode == "fixed_rate" and self.rate_hz is None:
            raise ValueError("publish mode 'fixed_rate' needs rate_hz")
        if self.mode != "fixed_rate" and self.rate_hz is not None:
            raise ValueError(f"rate_hz only applies to mode 'fixed_rate', not '{self.mode}'")
        if self.mode != "on_change" and self.heartbeat_s is not None:
            raise ValueError(f"heartbeat_s only applies to mode 'on_change', not '{self.mode}'")
        return self


class CommandsConfig(StrictModel):
    """Who may send state-changing commands (``ota`` deliveries and rollback): an operator's Ed25519 signature,
    fresh and never seen before (docs/mqtt.md, "Signed commands"). Read-only commands (``status``) need none."""

    require_signature: bool = Field(True, description="refuse unsigned state-changing commands; false only on a "
                                    "broker that nobody but operators can publish to (a signed one is still checked)")
    max_age_s: float = Field(300.0, ge=1, le=86400, description="a signed command older than this is refused "
                             "(expired); its nonce is remembered this long (plus clock_skew_s)")
    clock_skew_s: float = Field(30.0, ge=0, le=3600, description="how far the operator's clock may be ahead of "
                                "the device's (issued in the future) or behind it (added to max_age_s)")
    operator_keys: list[Path] = Field(default_factory=list, description="public keys (PEM files or directories of "
                                      "*.pub/*.pem) whose signatures authorize commands; empty: ota.trusted_keys")


class MqttConfig(StrictModel):
    """The MQTT publisher: where, how securely, how reliably."""

    host: str = Field("localhost", min_length=1, max_length=253, description="broker host name or address (one "
                      "broker; `hosts` for a failover list)")
    port: int = Field(1883, ge=1, le=65535, description="broker port (8883 is the usual TLS port); with `hosts`, the "
                      "port of an entry that names none")
    hosts: Optional[list[BrokerAddress]] = Field(
        None, min_length=1, max_length=16, description="brokers in order of preference, each host, host:port or "
        "{host, port}: on a failed connect or a lost connection the session moves to the next (docs/fleet.md); "
        "instead of `host`")
    protocol: Literal["3.1.1", "5"] = Field("3.1.1", description="MQTT protocol version")
    transport: Literal["tcp", "websockets"] = Field("tcp", description="MQTT over TCP or over WebSockets")
    websocket_path: str = Field("/mqtt", pattern=r"^/", description="websockets only: the HTTP path")
    tls: Optional[TlsConfig] = Field(None, description="TLS settings; None: plain TCP")
    username: Optional[str] = Field(None, min_length=1, description="broker user")
    password: Optional[SecretStr] = Field(None, description="password (use ${ENV} in YAML, or password_file)")
    password_file: Optional[Path] = Field(None, description="file holding the password (trailing newline ignored)")
    client_id: Optional[str] = Field(None, min_length=1, max_length=128, pattern=r"^[^\s+#/]+$",
                                     description="stable client id for the persistent session; "
                                     "None: appliance-<device_id>")
    clean_session: bool = Field(False, description="False keeps the broker-side session (command subscriptions "
                                "and queued commands) across reconnects")
    session_expiry_s: int = Field(3600, ge=0, le=2**32 - 1, description="MQTT 5: how long the broker keeps the "
                                  "session after a disconnect")
    topic_prefix: str = Field("appliance", min_length=1, max_length=128, pattern=PREFIX_PATTERN,
                              description="first topic levels, e.g. 'factory/line1'")
    device_id: Id = Field(..., description="this appliance's topic level")
    keepalive_s: int = Field(30, ge=5, le=3600, description="MQTT keepalive; the broker sends the last will after "
                             "1.5x this without traffic")
    connect_timeout_s: float = Field(10.0, gt=0, le=300, description="TCP/TLS connect and CONNACK wait")
    inflight_window: int = Field(100, ge=1, le=10000, description="detections sent but not yet acknowledged")
    backoff: BackoffConfig = Field(default_factory=BackoffConfig)
    qos: QosConfig = Field(default_factory=QosConfig)
    spool: SpoolConfig = Field(default_factory=SpoolConfig)
    health_interval_s: float = Field(30.0, ge=1, le=3600, description="period of the health message")
    publish: PublishConfig = Field(default_factory=PublishConfig, description="default publish mode per camera")
    cameras: dict[str, PublishConfig] = Field(default_factory=dict, description="publish mode per camera id")
    sparkplug: Optional[SparkplugConfig] = Field(None, description="a Sparkplug B edge node beside the JSON topics "
                                                 "(docs/sparkplug.md); None: off")
    commands: CommandsConfig = Field(default_factory=CommandsConfig, description="signed state-changing commands")

    @model_validator(mode="after")
    def _auth(self) -> "MqttConfig":
        if self.password is not None and self.password_file is not None:
            raise ValueError("give either password or password_file, not both")
        if (self.password is not None or self.password_file is not None) and self.username is None:
            raise ValueError("a password needs a username")
        if self.transport == "websockets" and any(b.port == 1883 for b in self.brokers):
            raise ValueError("transport 'websockets' on port 1883 (the plain MQTT port) is almost certainly wrong; "
                             "set the broker's websockets listener port")
        return self

    @model_validator(mode="after")
    def _one_spelling_of_brokers(self) -> "MqttConfig":
        if self.hosts is None:
            return self
        if "host" in self.model_fields_set:
            raise ConfigFieldError(("host",), "give either host (one broker) or hosts (a failover list), not both")
        seen: dict[Broker, int] = {}
        for index, broker in enumerate(self.brokers):
            if broker in seen:
                raise ConfigFieldError(("hosts", index), f"broker {broker} is listed twice (entries {seen[broker]} "
                                       f"and {index}); each broker once, in order of preference")
            seen[broker] = index
        return self

    @model_validator(mode="after")
    def _camera_ids(self) -> "MqttConfig":
        from appliance.mqtt.errors import MqttConfigError
        from appliance.mqtt.topics import check_camera_id  # lazy: topics imports nothing of pydantic

        for camera_id in self.cameras:
            try:
                check_camera_id(camera_id)
            except MqttConfigError as exc:
                raise ValueError(str(exc)) from None  # a ValidationError, so check-config shows the line
        return self

    @property
    def brokers(self) -> tuple[Broker, ...]:
        """The brokers in order of preference: ``hosts``, or the one ``host:port``."""
        if self.hosts is None:
            return (Broker(self.host, self.port),)
        return tuple(Broker(h.host, h.port if h.port is not None else self.port) for h in self.hosts)

    @property
    def effective_client_id(self) -> str:
        return self.client_id or f"appliance-{self.device_id}"

    def spool_path(self, state_dir: Path) -> Path:
        """spool.path, relative to the state directory unless absolute; default <state_dir>/mqtt-spool.sqlite3."""
        if self.spool.path is None:
            return Path(state_dir) / "mqtt-spool.sqlite3"
        return Path(state_dir) / self.spool.path  # an absolute spool.path wins over state_dir

    def publish_config(self, camera_id: str) -> PublishConfig:
        return self.cameras.get(camera_id, self.publish)
