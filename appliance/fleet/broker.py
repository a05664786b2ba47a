"""The operator's side of the broker for ``appliance ota rollout``: connecting (``connect``), sending a command to a
device (``send_command``: every command the rollout sends goes through it, so that the operator's signature is
added in one place), and publishing a retained document. Failures are ``PushError`` (the broker could not be
reached, or did not acknowledge).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import paho.mqtt.client as mqtt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.fleet.push import PushError
from appliance.mqtt.cliclient import CliClient
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.errors import MqttError
from appliance.ota.commandsig import sign_command

MessageCallback = Callable[[str, bytes], None]  # topic, payload; on paho's network thread


def connect(config: MqttConfig, name: str, on_message: MessageCallback | None = None) -> CliClient:
    """A connected client (``.client``, its network loop running; ``close()`` it), with the TLS and credentials of
    ``config`` (the CLI's broker options). Raises PushError when the broker cannot be reached or refuses it."""
    try:
        cli = CliClient(config, name)
        if on_message is not None:
            cli.client.on_message = lambda _c, _u, msg: on_message(msg.topic, bytes(msg.payload))
        cli.connect()
    except MqttError as exc:
        raise PushError(str(exc)) from None
    return cli


def _publish(client: mqtt.Client, topic: str, payload: bytes, timeout_s: float, retain: bool = False) -> None:
    info = client.publish(topic, payload, qos=1, retain=retain)
    info.wait_for_publish(timeout_s)
    if not info.is_published():
        raise PushError(f"the message to {topic} was not acknowledged within {timeout_s} s")


def send_command(client: mqtt.Client, prefix: str, device: str, name: str, args: Mapping[str, Any],
                 request_id: str, sign_key: Ed25519PrivateKey | None, timeout_s: float = 30.0) -> None:
    """Publish the command ``name`` with ``args`` to ``<prefix>/<device>/command/<name>`` (QoS 1, waiting for
    the PUBACK), signed with ``sign_key`` (devices refuse unsigned state-changing commands: docs/mqtt.md,
    "Signed commands"). The one function every operator command goes through."""
    payload = ({"request_id": request_id, "args": dict(args)} if sign_key is None else
               sign_command(sign_key, topic_prefix=prefix, device_id=device, command=name, args=dict(args),
                            request_id=request_id))
    body = json.dumps(payload).encode()
    _publish(client, f"{prefix}/{device}/command/{name}", body, timeout_s)


def publish_retained(client: mqtt.Client, topic: str, doc: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    """A retained JSON document (QoS 1, waiting for the PUBACK): the broker hands it to every later subscriber."""
    _publish(client, topic, json.dumps(doc).encode(), timeout_s, retain=True)
