"""A reload's publish modes: a camera whose mode changed goes through its new mode from its next frame, the others
keep their gates (an on_change camera still suppresses an unchanged frame)."""

from __future__ import annotations

from pathlib import Path

from mqtt_helpers import frame, make_config
from support.mosquitto import Mosquitto

from appliance.mqtt.config import PublishConfig
from appliance.mqtt.publisher import MqttPublisher, PublishResult

S, X = PublishResult.SPOOLED, PublishResult.SUPPRESSED


def test_a_changed_mode_applies_from_the_next_frame_and_an_unchanged_one_keeps_its_gate(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "broker")  # never started: what is admitted stays in the spool
    config = make_config(broker, cameras={"door": {"mode": "on_change"}, "belt": {"mode": "on_change"}})
    publisher = MqttPublisher(config, tmp_path / "spool.sqlite3")
    publisher.start()
    try:
        assert publisher.publish_detections_many([frame("door", 0), frame("belt", 0)]) == [S, S]
        assert publisher.publish_detections_many([frame("door", 1), frame("belt", 1)]) == [X, X]  # unchanged
        publisher.set_publish_modes(PublishConfig(), {"belt": PublishConfig(mode="on_change")})
        assert publisher.publish_detections_many([frame("door", 2), frame("belt", 2)]) == [S, X]
        assert publisher.config.publish_config("door").mode == "every_frame"
    finally:
        publisher.stop()
