"""A camera whose source is absent at boot (a USB camera unplugged, a video not copied yet) is a waiting camera:
`appliance run` as a real process starts with the cameras it has, serves them, reports the absent one as waiting
(MQTT camera status, /healthz, `appliance status`, /metrics) and picks it up once its file is moved into place.
While it waits the level is degraded (/readyz 503, `appliance status` exit 1 with the reason, /livez 200); once
it streams, ok again, and its retained status keeps the old error only as `last_error`."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.daemon import RunningDaemon, device_of, make_camera_dir, write_config
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.subscriber import Subscriber

from appliance.capture.sample import build_sample_video
from appliance.commands.status import fetch_health
from appliance.mqtt.schema import load_schema

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


def _waiting_gauge(url: str, camera: str) -> float | None:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "appliance_camera_waiting" and sample.labels.get("camera") == camera:
                return sample.value
    return None


def _code(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_camera_absent_at_boot_waits_while_the_others_run_and_starts_when_its_file_appears(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> None:
    camera_dir = make_camera_dir(tmp_path)
    staged = build_sample_video(tmp_path / "staging" / "sample.mp4")
    later = tmp_path / "later.mp4"  # line2's video: not there when the appliance starts
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = write_config(tmp_path, broker, shm_root, camera_dir, later, health_port=port, engine_seed=engine_seed)
    device = device_of(config)
    subscriber = Subscriber(broker, f"appliance/{device}/#")
    daemon = RunningDaemon(tmp_path, config, REPO)

    def detections(camera: str) -> list[dict]:
        return [m for m in subscriber.of_type("detections") if m["camera_id"] == camera]

    def line2_status(state: str) -> list[dict]:
        return [m for m in subscriber.of_type("camera_status") if m["camera_id"] == "line2" and m["state"] == state]

    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: len(detections("line1")) >= 3 and line2_status("waiting"), 120,
                    "line1's detections and line2 waiting")
        waiting = line2_status("waiting")[0]
        jsonschema.validate(waiting, load_schema("camera_status"))
        assert f"file {later} does not exist" in waiting["detail"], waiting
        since = waiting["since_ms"]
        assert since <= waiting["time_ms"]

        health = fetch_health(url)
        assert health["ok"] and health["level"] == "degraded", health  # serving, not everything: not failed
        assert health["reasons"] == [f"camera line2 is waiting: {health['cameras']['line2']['waiting_for']}"]
        assert (_code(f"{url}/livez"), _code(f"{url}/readyz"), _code(f"{url}/healthz")) == (200, 503, 200)
        line2 = health["cameras"]["line2"]
        assert line2["state"] == "waiting" and f"{later} does not exist" in line2["waiting_for"], line2
        assert line2["waiting_since"] == waiting["since"], (line2, waiting)  # one moment, wherever it is shown
        assert "1/2 cameras streaming (1 waiting for their source)" in health["status"], health["status"]
        shown = subprocess.run([sys.executable, "-m", "appliance", "status", "--url", url], capture_output=True,
                               text=True, timeout=60, cwd=REPO)
        assert shown.returncode == 1, shown.stderr  # WARNING
        assert shown.stdout.startswith("WARNING: ") and "  - camera line2 is waiting: " in shown.stdout, shown.stdout
        assert f"line2: waiting since {line2['waiting_since']}: file {later} does not exist" in shown.stdout, \
            shown.stdout
        assert _waiting_gauge(url, "line2") == 1 and _waiting_gauge(url, "line1") == 0
        assert detections("line2") == []  # the sentinel: line1 has published while line2 had nothing

        staged.rename(later)  # the video is moved into place
        daemon.wait(lambda: len(detections("line2")) >= 3, 120, "line2's detections once its file is there")
        daemon.wait(lambda: line2_status("streaming"), 30, "line2 streaming")
        streaming = line2_status("streaming")[-1]
        jsonschema.validate(streaming, load_schema("camera_status"))
        assert "detail" not in streaming, streaming  # now, not then
        assert f"file {later} does not exist" in streaming["last_error"], streaming
        assert since <= streaming["last_error_time_ms"] <= streaming["time_ms"], streaming
        daemon.wait(lambda: fetch_health(url)["level"] == "ok", 30, "the level ok again")
        assert _code(f"{url}/readyz") == 200
        daemon.wait(lambda: _waiting_gauge(url, "line2") == 0, 30, "line2 no longer waiting in /metrics")
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()
