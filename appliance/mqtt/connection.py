"""Builds a paho client from MqttConfig, points it at one of the configured brokers, and turns connection failures
into sentences an operator can act on (each names the broker it is about)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Optional

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from appliance.mqtt.config import Broker, MqttConfig
from appliance.mqtt.errors import MqttConfigError


def resolve_password(config: MqttConfig) -> Optional[str]:
    if config.password is not None:
        return config.password.get_secret_value()
    if config.password_file is not None:
        try:
            return Path(config.password_file).read_text("utf-8").rstrip("\r\n")
        except OSError as exc:
            raise MqttConfigError(f"cannot read mqtt.password_file {config.password_file}: {exc.strerror}") from exc
    return None


def configure_security(client: paho.Client, config: MqttConfig) -> None:
    """TLS (server certificate always verified; client certificate for mutual TLS) and username/password, from
    ``config``: the appliance and every CLI that talks MQTT configure a client the same way, here.
    Raises MqttConfigError for unusable TLS material or an unreadable password file."""
    if config.tls is not None:
        tls = config.tls
        for label, path in (("tls.ca", tls.ca), ("tls.cert", tls.cert), ("tls.key", tls.key)):
            if path is not None and not Path(path).is_file():
                raise MqttConfigError(f"mqtt.{label}: no such file {path}")
        try:
            client.tls_set(ca_certs=str(tls.ca) if tls.ca else None,
                           certfile=str(tls.cert) if tls.cert else None,
                           keyfile=str(tls.key) if tls.key else None,
                           cert_reqs=ssl.CERT_REQUIRED)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise MqttConfigError(f"mqtt.tls: cannot load the CA/certificate/key: {exc}") from exc
        client.tls_insecure_set(not tls.check_hostname)
    password = resolve_password(config)
    if config.username is not None:
        client.username_pw_set(config.username, password)


def build_client(config: MqttConfig, will_topic: str, will_payload: bytes, will_qos: int,
                 broker: Optional[Broker] = None) -> paho.Client:
    """A configured, unconnected client aimed at ``broker`` (default: the first of ``config.brokers``). Raises
    MqttConfigError for unusable TLS material or password file."""
    v5 = config.protocol == "5"
    client = paho.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=config.effective_client_id,
        clean_session=None if v5 else config.clean_session,
        protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
        transport=config.transport,
        reconnect_on_failure=False,  # we own the retry loop, its backoff and its error reporting
    )
    if config.transport == "websockets":
        client.ws_set_options(path=config.websocket_path)
    configure_security(client, config)
    client.will_set(will_topic, will_payload, qos=will_qos, retain=True)
    client.max_inflight_messages_set(0)  # the publisher bounds in-flight messages itself (see window.py)
    client.max_queued_messages_set(0)
    # Only the network thread may write to the socket. Without a write-registration callback, paho's publish()
    # writes from the calling thread, racing the network thread's loop(): two threads pop packets off one queue
    # and send them, so PUBLISH packets reach the broker out of order (seen: seq 259 before 258), and partial
    # writes can interleave. With the callback set, publish() only queues the packet and wakes loop() through
    # paho's socket pair; loop() writes.
    client.on_socket_register_write = _network_thread_writes
    client.connect_timeout = config.connect_timeout_s
    aim(client, config, broker or config.brokers[0])
    return client


def aim(client: paho.Client, config: MqttConfig, broker: Broker) -> None:
    """Point a client that is not connected at ``broker``; its next reconnect() goes there. paho keeps its
    queue of unacknowledged messages; TLS settings are the client's, and the certificate is checked against
    this broker's host (paho's server_hostname)."""
    if config.protocol == "5":
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0 if config.clean_session else config.session_expiry_s
        client.connect_async(broker.host, broker.port, config.keepalive_s, clean_start=config.clean_session,
                             properties=props)
    else:
        client.connect_async(broker.host, broker.port, config.keepalive_s)


def _network_thread_writes(client: paho.Client, userdata: object, sock: object) -> None:
    """Deliberately empty: its presence makes paho defer socket writes to loop() (see build_client)."""


def describe_connect_error(exc: BaseException, config: MqttConfig, broker: Optional[Broker] = None) -> str:
    """``broker``: the one tried (default: the first of ``config.brokers``)."""
    broker = broker or config.brokers[0]
    where = str(broker)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS: the broker certificate at {where} failed verification ({exc.verify_message}); "
                "check mqtt.tls.ca and that the certificate names the host")
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake with {where} failed ({exc.reason or exc}); check the client certificate and key"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing accepts connections at {where} (connection refused); is the broker running?"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve broker host {broker.host!r}: {exc.strerror}"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"connecting to {where} timed out after {config.connect_timeout_s} s"
    if isinstance(exc, OSError):
        return f"cannot connect to {where}: {exc.strerror or exc}"
    return f"cannot connect to {where}: {type(exc).__name__}: {exc}"


def describe_refusal(reason: object, config: MqttConfig, broker: Optional[Broker] = None) -> str:
    text = str(reason)
    hint = ""
    lowered = text.lower()
    if "password" in lowered or "authori" in lowered:
        hint = "; check mqtt.username and the password"
    elif "identifier" in lowered:
        hint = "; check mqtt.client_id"
    return f"broker {broker or config.brokers[0]} refused the connection: {text}{hint}"


def describe_early_close(detail: str, config: MqttConfig, broker: Optional[Broker] = None) -> str:
    """The broker closed the connection before answering CONNECT: usually TLS on one side only, or a client
    certificate the broker does not accept (TLS 1.3 reports that only on the first read)."""
    where = str(broker or config.brokers[0])
    lowered = detail.lower()
    if "ssl" in lowered or "tls" in lowered or "certificate" in lowered:
        hint = "the broker rejected our TLS client certificate or TLS settings; check mqtt.tls.cert and mqtt.tls.key"
    elif config.tls is None:
        hint = "if that listener expects TLS, configure mqtt.tls"
    else:
        hint = "check that the port is an MQTT listener and the broker log"
    return f"{where} closed the connection before CONNACK ({detail}): {hint}"
