"""Engine build progress on MQTT: the supervisor's start-up build publishes each phase on the retained
``<prefix>/<device>/engines/status`` (schema engine_status), through a real broker and a real ONNX Runtime build
of the detector; a second start is a cache hit and says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.mosquitto import Mosquitto
from support.schemas import validate_message
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.appconfig.app import AppConfig
from appliance.detector.engines.progress import PHASES, ProgressEvent
from appliance.mqtt.errors import MqttConfigError
from appliance.mqtt.messages import engine_status_payload
from appliance.mqtt.publisher import State
from appliance.mqtt.schema import load_schema
from appliance.mqtt.topics import check_camera_id
from appliance.supervisor.app import Appliance
from appliance.supervisor.detectorsetup import ENGINE_STATUS, EngineStatusForwarder


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _event(phase: str, percent: float, model: str = "yolov3-tiny") -> ProgressEvent:
    return ProgressEvent(model, phase, percent, f"{phase} step", 1.5)


def test_the_schema_names_every_phase_the_engine_manager_reports() -> None:
    assert load_schema("engine_status")["properties"]["phase"]["enum"] == list(PHASES)


def test_each_phase_and_each_end_is_published_and_ticks_within_a_phase_are_thinned() -> None:
    clock, sent = Clock(), []
    forward = EngineStatusForwarder(lambda suffix, payload: sent.append((suffix, payload)), "dev1",
                                    min_interval_s=2.0, clock=clock, wall=lambda: 1_700_000_000.0)
    forward(_event("fingerprint", 0))
    forward(_event("parse", 5))
    for percent in (10, 20, 30):  # a builder reporting many times a second
        forward(_event("build", percent))
        clock.now += 0.5
    clock.now += 1.0  # 2.5 s since the first build event: the pulse goes out
    forward(_event("build", 60))
    forward(_event("verify", 80))
    forward(_event("done", 100))
    forward(_event("done", 100))  # a final event is never held back
    assert [(p["phase"], p["percent"]) for _, p in sent] == [
        ("fingerprint", 0), ("parse", 5), ("build", 10), ("build", 60), ("verify", 80), ("done", 100), ("done", 100)]
    assert {suffix for suffix, _ in sent} == {ENGINE_STATUS}
    for _, payload in sent:
        validate_message("engine_status", payload)
    assert sent[0][1]["time"] == "2023-11-14T22:13:20.000Z" and sent[0][1]["device_id"] == "dev1"


def test_a_new_model_is_a_new_phase() -> None:
    sent: list[Any] = []
    forward = EngineStatusForwarder(lambda suffix, payload: sent.append(payload), "dev1", clock=Clock())
    forward(_event("build", 10, model="a"))
    forward(_event("build", 10, model="b"))
    assert [p["model"] for p in sent] == ["a", "b"]


def test_an_event_outside_the_schema_does_not_validate() -> None:
    bad = engine_status_payload("dev1", {**_event("build", 10).to_dict(), "phase": "compiling"}, 0.0)
    with pytest.raises(Exception, match="compiling"):
        validate_message("engine_status", bad)


def test_engines_is_a_reserved_camera_id() -> None:
    with pytest.raises(MqttConfigError, match="reserved"):
        check_camera_id("engines")


def _statuses(sub: Subscriber) -> list[dict[str, Any]]:
    """The engine status payloads so far, each with its retain flag as ``_retained``."""
    return [{**m.json(), "_retained": m.retain} for m in sub.messages]


@pytest.mark.usefixtures("detector_onnx")  # fails, not skips, without the detector (tests/conftest.py)
def test_the_start_up_build_reports_every_phase_on_mqtt_and_a_restart_reports_the_cache_hit(
        tmp_path: Path, broker: Mosquitto) -> None:
    config = AppConfig.model_validate({
        "device": {"id": "eng1"}, "mqtt": {"host": "127.0.0.1", "port": broker.port},
        "paths": {"state_dir": str(tmp_path / "state")}, "model": {"builder": "onnxruntime"},
        "cameras": [{"id": "c1", "source": {"type": "images", "path": str(tmp_path)}, "width": 64, "height": 64,
                     "fps": 2}]})
    sub = Subscriber(broker, "appliance/eng1/engines/status")
    try:
        for expected_end in ("done", "cached"):  # a first start builds, a second finds the engine in the cache
            sub.clear()
            app = Appliance(config)
            connected = app._start_publisher()  # the first two start steps; the rest needs Triton and cameras
            try:
                wait_until(lambda: connected.publisher.state is State.CONNECTED, 20, 0.05, "the publisher to connect")
                app._build_engine(connected)
                wait_until(lambda: any(m["phase"] == expected_end for m in _statuses(sub)), 20, 0.05,
                           f"engine status phase {expected_end!r}")
            finally:
                connected.publisher.stop()
            received = _statuses(sub)
            for message in received:
                validate_message("engine_status", {k: v for k, v in message.items() if k != "_retained"})
            phases = [m["phase"] for m in received]
            assert phases[0] == "fingerprint" and phases[-1] == expected_end, phases
            if expected_end == "done":
                seen = [p for p in dict.fromkeys(phases)]
                assert seen == ["fingerprint", "parse", "build", "verify", "install", "done"], phases
                percents = [m["percent"] for m in received]
                assert percents == sorted(percents) and percents[-1] == 100
            else:
                assert phases == ["fingerprint", "cached"]
            assert received[-1]["model"] == "yolov3-tiny" and received[-1]["device_id"] == "eng1"

        # Retained: a dashboard that subscribes later still learns how the last build ended.
        late = Subscriber(broker, "appliance/eng1/engines/status")
        try:
            late_received = late.wait_for(lambda ms: _statuses(late), 20, "the retained engine status")
            assert late_received[0]["phase"] == "cached" and late_received[0]["_retained"]
        finally:
            late.close()
    finally:
        sub.close()
