"""A short-lived MQTT client for the command line (``appliance ota push`` and other operator tools).

It takes the same MqttConfig as the appliance and configures TLS and credentials through
:func:`appliance.mqtt.connection.configure_security`, so a CLI and the device it talks to cannot drift apart.
Unlike the appliance's session it connects once, fails at once with a sentence an operator can act on (wrong CA,
client certificate refused, wrong password, nothing listening), and never takes the appliance's client id: a
second client with the device's id would make the broker disconnect the device.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Optional

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from appliance.mqtt.config import Broker, MqttConfig
from appliance.mqtt.connection import configure_security, describe_connect_error, describe_early_close, describe_refusal
from appliance.mqtt.errors import MqttConnectError


class CliClient:
    """``with CliClient(config, "ota-push") as client:`` a connected paho client with its network loop running.

    Raises MqttConfigError (unusable TLS material or password file) or MqttConnectError (could not connect)."""

    def __init__(self, config: MqttConfig, purpose: str, timeout_s: Optional[float] = None) -> None:
        self.config = config
        self.client_id = f"{purpose}-{uuid.uuid4().hex[:8]}"
        self.timeout_s = config.connect_timeout_s if timeout_s is None else timeout_s
        self._answered = threading.Event()
        self._reason: Any = None
        self._socket_error: Optional[str] = None
        v5 = config.protocol == "5"
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id,
                                  clean_session=None if v5 else True,
                                  protocol=paho.MQTTv5 if v5 else paho.MQTTv311, transport=config.transport,
                                  reconnect_on_failure=False)
        if config.transport == "websockets":
            self.client.ws_set_options(path=config.websocket_path)
        configure_security(self.client, config)
        self.client.connect_timeout = self.timeout_s
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_log = self._on_log

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._reason = reason
        self._answered.set()

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        if self._reason is None:
            self._reason = f"disconnected: {reason}"
        self._answered.set()

    def _on_log(self, client: paho.Client, userdata: Any, level: int, buf: str) -> None:
        if level == paho.MQTT_LOG_ERR and self._socket_error is None:
            self._socket_error = buf  # the first error is the cause (a TLS alert from the broker, say)

    def _reachable_broker(self) -> Broker:
        """Open the connection to the first broker of ``mqtt.hosts`` (or the one ``host``) that answers; a broker
        that refuses the client is an error at once (the others would refuse it too)."""
        errors = []
        for broker in self.config.brokers:
            try:
                self.client.connect(broker.host, broker.port, self.config.keepalive_s)
                return broker
            except Exception as exc:  # socket, TLS and DNS errors: describe_connect_error says which
                errors.append(describe_connect_error(exc, self.config, broker))
        raise MqttConnectError("; ".join(errors))

    def __enter__(self) -> paho.Client:
        return self.connect()

    def connect(self) -> paho.Client:
        """Connect (the first broker that answers) and start the network loop; ``close()`` ends both."""
        cfg = self.config
        broker = self._reachable_broker()
        self.client.loop_start()
        try:
            if not self._answered.wait(self.timeout_s):
                raise MqttConnectError(f"no CONNACK from {broker} within {self.timeout_s} s")
            reason = self._reason
            if isinstance(reason, str):  # closed before CONNACK: a refused client certificate, say
                raise MqttConnectError(describe_early_close(self._socket_error or reason, cfg, broker))
            if reason.is_failure:
                raise MqttConnectError(describe_refusal(reason, cfg, broker))
        except BaseException:
            self.close()
            raise
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
