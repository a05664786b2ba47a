"""The operator's side of the broker for ``appliance ota rollout``: connecting (``connect``), sending a command to a
device (``send_command``: every command the rollout sends goes through it, so that the operator's signature is
added in one place), and publishing a retained document. Failures are ``PushError`` (the broker could not be
reached, or did not acknowledge).
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import paho.mqtt.client as mqtt

from appliance.ota.push import PushError

MessageCallback = Callable[[str, bytes], None]  # topic, payload; on paho's network thread


@dataclass(frozen=True)
class BrokerOptions:
    """Where the operator's tools connect and as whom (the CLI's --mqtt, --username, --password)."""

    host: str
    port: int = 1883
    username: str | None = None
    password: str | None = None
    timeout_s: float = 30.0


def connect(options: BrokerOptions, name: str, on_message: MessageCallback | None = None) -> mqtt.Client:
    """A connected client with its network loop running (``close`` it). Raises PushError when the broker cannot
    be reached or refuses the connection."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{name}-{uuid.uuid4().hex[:8]}")
    if options.username:
        client.username_pw_set(options.username, options.password)
    connected = threading.Event()
    result: dict[str, Any] = {}

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any = None) -> None:
        result["reason"] = reason
        connected.set()

    client.on_connect = on_connect
    if on_message is not None:
        client.on_message = lambda _c, _u, msg: on_message(msg.topic, bytes(msg.payload))
    try:
        client.connect(options.host, options.port)
    except OSError as exc:
        raise PushError(f"cannot reach the broker at {options.host}:{options.port}: {exc}") from None
    client.loop_start()
    if not connected.wait(options.timeout_s) or getattr(result.get("reason"), "is_failure", False):
        close(client)
        raise PushError(f"broker {options.host}:{options.port} did not accept the connection: {result.get('reason')}")
    return client


def close(client: mqtt.Client) -> None:
    client.disconnect()
    client.loop_stop()


def _publish(client: mqtt.Client, topic: str, payload: bytes, timeout_s: float, retain: bool = False) -> None:
    info = client.publish(topic, payload, qos=1, retain=retain)
    info.wait_for_publish(timeout_s)
    if not info.is_published():
        raise PushError(f"the message to {topic} was not acknowledged within {timeout_s} s")


def send_command(client: mqtt.Client, prefix: str, device: str, name: str, args: Mapping[str, Any],
                 request_id: str, timeout_s: float = 30.0) -> None:
    """Publish the command ``name`` with ``args`` to ``<prefix>/<device>/command/<name>`` (QoS 1, waiting for
    the PUBACK). The one function every operator command goes through."""
    body = json.dumps({"request_id": request_id, "args": dict(args)}).encode()
    _publish(client, f"{prefix}/{device}/command/{name}", body, timeout_s)


def publish_retained(client: mqtt.Client, topic: str, doc: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    """A retained JSON document (QoS 1, waiting for the PUBACK): the broker hands it to every later subscriber."""
    _publish(client, topic, json.dumps(doc).encode(), timeout_s, retain=True)
