"""The demo's own config (appliance/appconfig/demo.yaml, what scripts/demo.sh and a bare `appliance run` run)
through `appliance run` as a real process, with the real detector and a real mosquitto: people on vtest.avi
cross the `walkway` line and enter the `front` zone within a bounded time, so the README's demo cannot rot.

The file is used as written; only a `paths:` section is appended (its own state dir, and a private shm root so
its `hall` ring cannot meet another run's) and the ports come from the environment variables the config reads,
as scripts/demo.sh sets them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.daemon import RunningDaemon
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.schemas import validate_message
from support.subscriber import Subscriber

from appliance.appconfig.demo import DEMO_CONFIG, DEMO_VIDEO_ENV

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
EVENTS_WITHIN_S = 90.0  # README's demo output has a cross at video frame 13 and an enter at 15: ~5 s at 3 fps

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("detector_onnx"),  # fails, not skips, without the detector (tests/conftest.py)
]


def test_the_demo_config_raises_cross_and_enter_events(tmp_path: Path, shm_root: Path, broker: Mosquitto,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert VTEST.is_file(), f"{VTEST} missing: scripts/setup.d/40-vtest.sh fetches it"
    text = DEMO_CONFIG.read_text()
    assert "\npaths:" not in text, "the demo config grew a paths section: merge instead of appending"
    config = tmp_path / "demo.yaml"
    config.write_text(f"{text}\npaths:\n  state_dir: {tmp_path / 'state'}\n  shm_root: {shm_root}\n")
    monkeypatch.setenv("APPLIANCE_MQTT_PORT", str(broker.port))
    monkeypatch.setenv("APPLIANCE_HEALTH_PORT", str(free_port()))
    monkeypatch.setenv(DEMO_VIDEO_ENV, str(VTEST))
    subscriber = Subscriber(broker, "appliance/demo/#")
    daemon = RunningDaemon(tmp_path, config, REPO)  # inherits the environment set above
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        ready = time.monotonic()

        def kinds() -> set[str]:
            return {e["event"] for e in subscriber.of_type("event")}

        daemon.wait(lambda: {"cross", "enter"} <= kinds(), EVENTS_WITHIN_S, "cross and enter events")
        took = time.monotonic() - ready
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()
    events = subscriber.of_type("event")
    for event in events:
        validate_message("event", event)
    assert {e["camera_id"] for e in events} == {"hall"}
    assert {e["line"] for e in events if e["event"] == "cross"} == {"walkway"}
    assert {e["zone"] for e in events if e["event"] == "enter"} == {"front"}
    assert took < EVENTS_WITHIN_S
