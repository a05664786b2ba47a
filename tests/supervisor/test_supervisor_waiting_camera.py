"""A camera whose source is absent at boot (a USB camera unplugged, a video not copied yet) is a waiting camera:
`appliance run` as a real process starts with the cameras it has, serves them, reports the absent one as waiting
(MQTT camera status, /healthz, `appliance status`, /metrics) and picks it up once its file is moved into place.
A camera without width/height whose file is not there either waits for its size the same way (no ring can be made
yet) and starts, at its video's own size, once the file appears. While they wait the level is degraded (/readyz
503, `appliance status` exit 1 with the reasons, /livez 200); once they stream, ok again, and line2's retained
status keeps its old error only as `last_error`."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli import run_appliance
from support.daemon import RunningDaemon, device_of, make_camera_dir, write_config
from support.httpclient import get
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
    text = get(f"{url}/metrics", expect=200).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "appliance_camera_waiting" and sample.labels.get("camera") == camera:
                return sample.value
    return None


def test_a_camera_absent_at_boot_waits_while_the_others_run_and_starts_when_its_file_appears(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> None:
    camera_dir = make_camera_dir(tmp_path)
    staged = build_sample_video(tmp_path / "staging" / "sample.mp4")
    later = tmp_path / "later.mp4"  # line2's video: not there when the appliance starts
    staged3 = build_sample_video(tmp_path / "staging" / "small.mp4", width=480, height=360)
    sizeless = tmp_path / "sizeless.mp4"  # line3's: no width/height in its config, and no file at start
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = write_config(tmp_path, broker, shm_root, camera_dir, later, health_port=port, engine_seed=engine_seed,
                          sizeless=sizeless)
    device = device_of(config)
    subscriber = Subscriber(broker, f"appliance/{device}/#")
    daemon = RunningDaemon(tmp_path, config, REPO)

    def detections(camera: str) -> list[dict]:
        return [m for m in subscriber.of_type("detections") if m["camera_id"] == camera]

    def line2_status(state: str, camera: str = "line2") -> list[dict]:
        return [m for m in subscriber.of_type("camera_status") if m["camera_id"] == camera and m["state"] == state]

    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: len(detections("line1")) >= 3 and line2_status("waiting")
                    and line2_status("waiting", "line3"), 120, "line1's detections, line2 and line3 waiting")
        waiting = line2_status("waiting")[0]
        jsonschema.validate(waiting, load_schema("camera_status"))
        assert f"file {later} does not exist" in waiting["detail"], waiting
        since = waiting["since_ms"]
        assert since <= waiting["time_ms"]

        health = fetch_health(url)
        assert health["ok"] and health["level"] == "degraded", health  # serving, not everything: not failed
        assert health["reasons"] == [f"camera {c} is waiting: {health['cameras'][c]['waiting_for']}"
                                     for c in ("line2", "line3")]  # line3 has no ring yet: still counted
        assert [get(f"{url}/{path}").status for path in ("livez", "readyz", "healthz")] == [200, 503, 200]
        line2 = health["cameras"]["line2"]
        assert line2["state"] == "waiting" and f"{later} does not exist" in line2["waiting_for"], line2
        assert line2["waiting_since"] == waiting["since"], (line2, waiting)  # one moment, wherever it is shown
        assert "1/3 cameras streaming (2 waiting for their source)" in health["status"], health["status"]
        _check_line3_waits(line2_status("waiting", "line3")[0], health["cameras"]["line3"], sizeless)
        shown = run_appliance("status", "--url", url, expect=1)  # WARNING
        assert shown.stdout.startswith("WARNING: ") and "  - camera line2 is waiting: " in shown.stdout, shown.stdout
        assert f"line2: waiting since {line2['waiting_since']}: file {later} does not exist" in shown.stdout, \
            shown.stdout
        assert f"line3: waiting since {health['cameras']['line3']['waiting_since']}: size unknown until the source " \
               "answers" in shown.stdout, shown.stdout
        assert [_waiting_gauge(url, c) for c in ("line1", "line2", "line3")] == [0, 1, 1]
        assert detections("line2") == detections("line3") == []  # line1 has published while they had nothing
        _reload_keeps_line3_waiting(config, daemon.process.pid, url, health["cameras"]["line3"])

        staged.rename(later)  # the videos are moved into place
        staged3.rename(sizeless)
        daemon.wait(lambda: len(detections("line2")) >= 3 and len(detections("line3")) >= 3, 120,
                    "line2's and line3's detections once their files are there")
        daemon.wait(lambda: line2_status("streaming") and line2_status("streaming", "line3"), 30,
                    "line2 and line3 streaming")
        daemon.wait(lambda: _waiting_gauge(url, "line2") == _waiting_gauge(url, "line3") == 0, 30,
                    "line2 and line3 no longer waiting in /metrics")
        line3 = fetch_health(url)["cameras"]["line3"]
        assert line3["state"] == "streaming" and line3["size"] == "480x360", line3  # its video's own size
        streaming = line2_status("streaming")[-1]
        jsonschema.validate(streaming, load_schema("camera_status"))
        assert "detail" not in streaming, streaming  # now, not then
        assert f"file {later} does not exist" in streaming["last_error"], streaming
        assert since <= streaming["last_error_time_ms"] <= streaming["time_ms"], streaming
        daemon.wait(lambda: fetch_health(url)["level"] == "ok", 30, "the level ok again")
        assert get(f"{url}/readyz").status == 200
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()


def _reload_keeps_line3_waiting(config: Path, pid: int, url: str, before: dict) -> None:
    """A reload of the same file while line3's source is silent is applied (nothing changed) and line3 waits on,
    since the same moment."""
    run_appliance("reload", "--config", str(config), "--pid", str(pid), timeout=180)
    assert fetch_health(url)["cameras"]["line3"] == before


def _check_line3_waits(status: dict, health: dict, video: Path) -> None:
    """The camera without a size waits for it: on MQTT and in /healthz, with the reason and what the source said."""
    jsonschema.validate(status, load_schema("camera_status"))
    reason = f"size unknown until the source answers (file {video} does not exist"
    assert status["detail"].startswith(reason), status
    assert health["state"] == "waiting" and health["waiting_for"] == status["detail"], health
    assert health["waiting_since"] == status["since"], (health, status)
