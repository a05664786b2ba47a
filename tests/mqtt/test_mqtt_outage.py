"""The broker goes away for 30 s while four cameras stream; every sequence number arrives, in order per camera."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from mqtt_helpers import CameraStreams, make_config, seqs_by_camera, validate
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber

from appliance.mqtt.publisher import MqttPublisher, State

CAMERAS = ("cam0", "cam1", "cam2", "cam3")
OUTAGE_S = 30.0


@pytest.mark.slow
def test_broker_down_30s_during_four_camera_stream_loses_nothing(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    sub = Subscriber(broker, ["plant/dev1/+/detections"], persistent=True)
    publisher = MqttPublisher(make_config(broker), tmp_path / "spool.sqlite3")
    streams = CameraStreams(publisher, CAMERAS, 0.05)  # 20 fps per camera
    try:
        publisher.start()
        assert publisher.wait_connected(15)
        streams.start()
        assert sub.wait_for(lambda ms: len(ms) >= 40)

        broker.stop()
        outage_end = time.monotonic() + OUTAGE_S
        while time.monotonic() < outage_end:
            time.sleep(0.5)  # the outage itself: the broker stays down OUTAGE_S while the cameras keep publishing
        during = publisher.stats()
        assert during.state is State.CONNECTING
        assert during.last_error and "refused" in during.last_error
        assert during.spool.backlog > 0.8 * OUTAGE_S * 20 * len(CAMERAS) * 0.5  # cameras kept spooling
        broker.start()
        assert publisher.wait_connected(30)
        time.sleep(3.0)  # live frames keep coming while the backlog replays
        streams.stop()
        assert publisher.wait_idle(60), publisher.stats()

        def complete(ms: list) -> bool:
            got = seqs_by_camera([json.loads(m.payload) for m in ms])
            return all(len(got.get(cam, [])) >= streams.sent[cam] for cam in CAMERAS)

        assert sub.wait_for(complete, timeout=60), {
            c: (streams.sent[c], len(v))
            for c, v in seqs_by_camera([json.loads(m.payload) for m in sub.messages]).items()}
        payloads = [json.loads(m.payload) for m in sub.messages]
        got = seqs_by_camera(payloads)
        for cam in CAMERAS:
            assert got[cam] == list(range(streams.sent[cam])), f"{cam}: lost or reordered sequence numbers"
        for p in payloads[::50]:
            validate("detections", p)
        final = publisher.stats()
        assert final.connects >= 2 and final.spool.backlog == 0
        assert final.spool.dropped_oldest == final.spool.dropped_newest == final.spool.dropped_expired == 0
    finally:
        streams.halt()
        publisher.stop()
        sub.close()
        broker.stop()
