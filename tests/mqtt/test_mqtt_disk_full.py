"""The publisher on a real full disk (a small tmpfs) during a broker outage: results held in memory within their
bound, detections dropped before events, every drop counted and announced by a gap record in order, and all that
was kept delivered once space and the broker return."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from mqtt_helpers import frame, make_config, validate
from support.mosquitto import Mosquitto
from support.mqttdocs import subscriber_check
from support.smalldisk import fill, small_tmpfs
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.events import Event
from appliance.mqtt.publisher import MqttPublisher, PublishResult

KB = 1024
FRAMES = 900  # per camera; far more than the disk and the memory bound hold


def _event(camera: str, seq: int) -> Event:
    return Event(event_id=f"{seq:032x}", camera_id=camera, seq=seq, event="enter", track_id=7, class_id=0,
                 class_name="person", score=0.9, capture_time=1_700_000_000.0 + seq, frame_seq=seq,
                 image_width=640, image_height=480, zone="floor")


def _covered(received: list[dict]) -> tuple[list[int], int]:
    """A camera's detections topic in arrival order -> every message_seq it accounts for (a detections message
    its own, a gap record its range), and the gaps' total count."""
    seqs, gaps = [], 0
    for m in received:
        if m["type"] == "gap":
            validate("gap", m)
            assert m["count"] == m["last_message_seq"] - m["first_message_seq"] + 1
            seqs += range(m["first_message_seq"], m["last_message_seq"] + 1)
            gaps += m["count"]
        else:
            seqs.append(m["message_seq"])
    return seqs, gaps


def test_a_full_disk_holds_drops_detections_first_counts_and_announces_every_gap(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    subscriber = Subscriber(broker, ["plant/dev1/+/detections", "plant/dev1/+/events"], persistent=True)
    config = make_config(broker, spool={"memory_bytes": 64 * KB})
    with small_tmpfs(tmp_path / "state", 2 * 1024 * KB) as state:
        publisher = MqttPublisher(config, state / "spool.sqlite3")
        try:
            publisher.start()
            assert publisher.wait_connected(20)
            broker.stop()  # the outage: everything stays in the spool, which fills the disk
            filler = fill(state, 160 * KB)
            caplog.set_level(logging.WARNING, logger="appliance.mqtt")
            for seq in range(1, FRAMES + 1):
                for camera in ("a", "b"):
                    assert publisher.publish_detections(frame(camera, seq)) is PublishResult.SPOOLED
                if seq % 10 == 0:
                    assert publisher.publish_events([_event("a", seq // 10)]) == 1
            stats = publisher.stats()
            assert stats.write_error and "full" in stats.write_error, stats
            assert 0 < stats.held_bytes <= 2 * (64 * KB + 4 * KB), stats  # the bound, per camera (+ one message)
            dropped = stats.results_dropped
            assert dropped.get(("a", "detections", "disk_full"), 0) > 0 and \
                dropped.get(("b", "detections", "disk_full"), 0) > 0, dropped
            assert not any(kind == "events" for _, kind, _ in dropped), dropped  # detections go first
            lines = [r for r in caplog.records if r.name.startswith("appliance.mqtt")]
            assert len(lines) < 10, [r.getMessage() for r in lines]  # one line when it starts, not one a frame

            filler.unlink()  # space returns, then the broker
            publisher.retry_held()
            assert publisher.stats().held == 0 and publisher.stats().write_error is None
            broker.start()
            total = sum(dropped.values())
            expected = 2 * FRAMES - total + FRAMES // 10
            wait_until(lambda: sum(1 for m in subscriber.json_on("") if m["type"] != "gap") >= expected, 60, 0.1,
                       f"{expected} kept results delivered")
        finally:
            publisher.stop()
            subscriber.close()
            broker.stop()
    for camera in ("a", "b"):
        seqs, gaps = _covered(subscriber.json_on(f"{camera}/detections"))
        assert seqs == list(range(1, FRAMES + 1)), camera  # in order, each one a message or inside a gap record
        assert gaps == dropped[(camera, "detections", "disk_full")]
        assert subscriber_check()(subscriber.json_on(f"{camera}/detections")) == []  # docs/mqtt.md's own check
    assert [e["seq"] for e in subscriber.json_on("a/events")] == list(range(1, FRAMES // 10 + 1))
    assert "writable again" in caplog.text
