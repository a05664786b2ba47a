"""What an MQTT subscriber sees in ``appliance bench e2e``: results/s and capture→arrival latency per message.

Every alternative that publishes (the naive design, the appliance) is measured here, by the same subscriber
code, so their numbers compare.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Received:
    """What a subscriber saw: arrival count, capture→arrival latencies (ms) and the appliance's own
    capture→submit time from each payload (``latency_ms.queue``) where it has one."""

    latencies_ms: list[float] = field(default_factory=list)
    to_submit_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, capture_ms: int, to_submit_ms: float | None = None) -> None:
        with self.lock:
            self.latencies_ms.append(time.time() * 1000 - capture_ms)
            if to_submit_ms is not None:
                self.to_submit_ms.append(to_submit_ms)

    def count(self) -> int:
        with self.lock:
            return len(self.latencies_ms)

    def since(self, start: int) -> list[float]:
        with self.lock:
            return self.latencies_ms[start:]


def subscriber(port: int, topic: str, into: Received):
    """A started paho client adding every message on ``topic`` to ``into``; the caller stops it."""
    import paho.mqtt.client as paho

    def on_message(_client, _userdata, msg) -> None:
        payload = json.loads(msg.payload)
        into.add(int(payload["capture_time_ms"]), payload.get("latency_ms", {}).get("queue"))

    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"bench-sub-{os.getpid()}-{topic.count('/')}")
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    client.subscribe(topic, qos=1)
    client.loop_start()
    return client


def topic_counter(port: int, topics: tuple[str, ...], into: dict[str, int]):
    """Counts messages per last topic level (``events``, ``snapshot``) into ``into``, from ``into``'s keys."""
    import paho.mqtt.client as paho

    lock = threading.Lock()

    def on_message(_client, _userdata, msg) -> None:
        if msg.retain:  # a retained snapshot from before this window is no new one
            return
        leaf = msg.topic.rsplit("/", 1)[-1]
        with lock:
            into[leaf] = into.get(leaf, 0) + 1

    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"bench-count-{os.getpid()}")
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    for topic in topics:
        client.subscribe(topic, qos=1)
    client.loop_start()
    return client


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    """Whether ``predicate`` came true within ``timeout`` seconds (the last messages still in flight)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
