"""Only the publisher's network thread writes to the broker socket.

paho's publish() called from another thread writes the packet itself, racing the network thread's loop(): both
pop packets off one queue and send them, so PUBLISH packets reach the broker out of order (at mosquitto: seq 259
received before 258, no DUP flag). build_client() makes publish() only queue.
"""

from __future__ import annotations

import time
from typing import Any

import paho.mqtt.client as paho
from mqtt_helpers import make_config
from support.mosquitto import Mosquitto

from appliance.mqtt.connection import build_client


def test_publish_from_another_thread_only_queues_and_the_loop_sends_in_order(broker: Mosquitto,
                                                                              subscriber_factory: Any) -> None:
    sub = subscriber_factory(broker, ["plant/dev1/order"])
    client = build_client(make_config(broker), "plant/dev1/status", b"offline", 1)
    client.reconnect()
    deadline = time.monotonic() + 10
    while not client.is_connected() and time.monotonic() < deadline:
        assert client.loop(0.05) == paho.MQTT_ERR_SUCCESS
    assert client.is_connected()
    try:
        for i in range(50):
            client.publish("plant/dev1/order", str(i).encode(), qos=1)
        # Nothing was written by publish(): all 50 packets wait for the network loop.
        assert client.want_write()
        while client.want_write() and time.monotonic() < deadline:
            assert client.loop(0.05) == paho.MQTT_ERR_SUCCESS
        assert sub.wait_for(lambda ms: len(ms) >= 50)
    finally:
        client.disconnect()
        client.loop(0.1)
    assert [int(m.payload) for m in sub.messages] == list(range(50))
