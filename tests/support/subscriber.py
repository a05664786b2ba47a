"""The one MQTT subscriber of the tests: a real paho client on its own network thread that records every message
on its topic filters, thread-safely, from the moment the broker acknowledged the subscription.

    with Subscriber(broker, ["plant/dev1/+/detections", "plant/dev1/status"]) as sub:   # returns after SUBACK
        sub.wait_for(lambda ms: len(ms) >= 3, timeout=20, what="three messages")     # or sub.wait_for(3)
        sub.of_type("detections")        # JSON payloads whose "type" is "detections"
        sub.messages[0].retain           # Message: topic, payload, qos, retain, properties, at, json()

``wait_for`` fails with an AssertionError that names what arrived. MQTT 3.1.1 by default, 5 with
``protocol=paho.MQTTv5`` (then ``properties`` holds each message's). It subscribes again on every reconnect;
``persistent`` keeps its session too, so that with a broker keeping persistence nothing published while it is
away is lost to it. A raw paho client stays only in a test about the client protocol itself.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable, Optional, Protocol, TypeVar, Union

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from support.mosquitto import TlsMaterial

T = TypeVar("T")


class Address(Protocol):
    """Where a broker listens (a Mosquitto, a LocalBroker)."""

    host: str
    port: int


@dataclass(frozen=True)
class Message:
    """One message as it arrived: ``at`` is time.monotonic() on arrival; ``properties`` is None under 3.1.1."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Optional[Properties]
    at: float

    @cached_property
    def _decoded(self) -> tuple[bool, Any]:
        try:
            return True, json.loads(self.payload)
        except ValueError:  # UnicodeDecodeError too: a JPEG snapshot, a Sparkplug protobuf
            return False, None

    @property
    def is_json(self) -> bool:
        return self._decoded[0]

    def json(self) -> Any:
        """The payload parsed as JSON (parsed once; ValueError if it is not JSON)."""
        ok, doc = self._decoded
        if not ok:
            raise ValueError(f"the payload on {self.topic} is not JSON: {self.payload[:60]!r}")
        return doc


class Subscriber:
    """Every message on ``topics`` (a filter or several, subscribed at ``qos``) from ``broker``; ``close()`` it,
    or use it as a context manager."""

    def __init__(self, broker: Address, topics: Union[str, Iterable[str]], *, qos: int = 1,
                 protocol: paho.MQTTProtocolVersion = paho.MQTTv311, persistent: bool = False,
                 tls: Optional[TlsMaterial] = None, username: Optional[str] = None, password: Optional[str] = None,
                 subscribe_timeout: float = 15.0) -> None:
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self._qos = qos
        self._messages: list[Message] = []
        self._cond = threading.Condition(threading.RLock())  # re-entrant: a predicate may read self.messages
        self._subscribed = threading.Event()
        self._refused: Optional[str] = None
        self.granted: list[Any] = []  # the SUBACK's reason codes, one per filter
        kwargs: dict[str, Any] = {} if protocol == paho.MQTTv5 else {"clean_session": not persistent}
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"test-sub-{uuid.uuid4().hex[:8]}",
                                  protocol=protocol, **kwargs)
        if tls is not None:  # mutual TLS with the material's client certificate
            self.client.tls_set(ca_certs=str(tls.ca.cert), certfile=str(tls.client.cert), keyfile=str(tls.client.key))
        if username is not None:
            self.client.username_pw_set(username, password)
        self.client.reconnect_delay_set(0.05, 0.5)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        connect: dict[str, Any] = {}
        if protocol == paho.MQTTv5:
            connect["clean_start"] = not persistent
            if persistent:  # the broker keeps the session (and queues for it) for a day while we are away
                connect["properties"] = Properties(PacketTypes.CONNECT)
                connect["properties"].SessionExpiryInterval = 24 * 3600
        self.client.connect(broker.host, broker.port, keepalive=30, **connect)
        self.client.loop_start()
        if not self._subscribed.wait(subscribe_timeout):
            self.close()
            raise AssertionError(f"the test subscriber on {self.topics} got no SUBACK in {subscribe_timeout:g} s"
                                 + (f" (connection refused: {self._refused})" if self._refused else ""))

    def _on_connect(self, client: paho.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if reason.is_failure:
            self._refused = str(reason)
        else:  # on every connect: after a reconnect a clean session has no subscription left
            client.subscribe([(t, self._qos) for t in self.topics])

    def _on_subscribe(self, _c: paho.Client, _u: Any, _mid: int, reason_codes: list[Any], _p: Any) -> None:
        self.granted = list(reason_codes)
        self._subscribed.set()

    def _on_message(self, _c: paho.Client, _u: Any, msg: paho.MQTTMessage) -> None:
        message = Message(msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain),
                          getattr(msg, "properties", None), time.monotonic())
        with self._cond:
            self._messages.append(message)
            self._cond.notify_all()

    # -- what arrived ------------------------------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        """Everything so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._messages)

    def on_topic(self, suffix: str) -> list[Message]:
        """The messages whose topic ends with ``suffix``."""
        return [m for m in self.messages if m.topic.endswith(suffix)]

    def json_on(self, suffix: str = "") -> list[Any]:
        """The JSON payloads of the messages whose topic ends with ``suffix`` (those that are not JSON left out)."""
        return [m.json() for m in self.on_topic(suffix) if m.is_json]

    def binary(self, suffix: str = "") -> list[Message]:
        """The messages whose topic ends with ``suffix`` and whose payload is not JSON (a JPEG snapshot)."""
        return [m for m in self.on_topic(suffix) if not m.is_json]

    def messages_of_type(self, kind: str, since: float = 0.0) -> list[Message]:
        """The JSON messages whose ``type`` is ``kind``, arrived at or after ``since`` (time.monotonic())."""
        return [m for m in self.messages
                if m.at >= since and m.is_json and isinstance(m.json(), dict) and m.json().get("type") == kind]

    def of_type(self, kind: str, since: float = 0.0) -> list[dict[str, Any]]:
        """The JSON payloads whose ``type`` is ``kind`` (the appliance's messages), arrived at or after ``since``."""
        return [m.json() for m in self.messages_of_type(kind, since)]

    def latest(self, topic: str) -> Optional[Message]:
        """The newest message on exactly ``topic``, or None."""
        return next((m for m in reversed(self.messages) if m.topic == topic), None)

    def clear(self) -> None:
        """Forget what arrived so far."""
        with self._cond:
            self._messages.clear()

    def wait_for(self, predicate: Union[int, Callable[[list[Message]], T]], timeout: float = 20.0,
                 what: str = "") -> T:
        """Wait until ``predicate(messages)`` is truthy and return its value (an int n >= 1: until n messages
        arrived, and return them); AssertionError naming ``what`` and what arrived once ``timeout`` seconds passed."""
        check: Callable[[list[Message]], Any] = predicate if callable(predicate) else (
            lambda ms: ms if len(ms) >= predicate else None)
        what = what or (f"{predicate} message(s)" if isinstance(predicate, int) else "the condition")
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = check(list(self._messages))
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} on {self.topics}; "
                                         f"{self._arrived()}")
                self._cond.wait(remaining)

    def _arrived(self) -> str:
        if not self._messages:
            return "nothing arrived"
        per_topic = ", ".join(f"{topic} x{n}" for topic, n in Counter(m.topic for m in self._messages).items())
        last = "; ".join(f"{m.topic}: {m.payload[:120]!r}" for m in self._messages[-5:])
        return f"{len(self._messages)} message(s) arrived ({per_topic}); the last: {last}"

    # -- as a client -------------------------------------------------------------------------------------------
    def publish(self, topic: str, payload: Union[str, bytes], qos: int = 1, retain: bool = False,
                properties: Optional[Properties] = None, timeout: float = 10.0) -> None:
        """Publish on this subscriber's connection and wait until it is sent (PUBACK at QoS 1)."""
        self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties).wait_for_publish(timeout)

    def close(self) -> None:
        self.client.disconnect()  # first, so the network thread wakes up and loop_stop() returns at once
        self.client.loop_stop()

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
