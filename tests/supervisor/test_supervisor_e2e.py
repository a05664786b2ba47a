"""The daemon end to end: `appliance run` as a real process with a real notify socket, a real broker, the real
detector and two cameras (a folder of real images, and the sample video made from them; on a CPU host with two
detector instances, so that a camera's frames can finish out of order and must still be published in order).
Truth comes from what the images show (Debian's darknet test images: a dog, an eagle, horses, a giraffe), not
from the code under test."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import jsonschema
import pytest
from support.cli import run_appliance
from support.daemon import IMAGES_IN_ORDER, RunningDaemon, device_of, make_camera_dir, write_config
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.capture.sample import SAMPLE_IMAGES, build_sample_video
from appliance.harness.processes import children_of, running
from appliance.mqtt.schema import load_schema

REPO = Path(__file__).resolve().parents[2]
# The sample video (appliance.capture.sample) at its defaults: 10 fps, 2 s per image.
FRAMES_PER_IMAGE = 20
SAMPLE_EXPECTED = {"dog": "dog", "eagle": "bird", "giraffe": "giraffe", "horses": "horse"}

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


def test_daemon_publishes_correct_detections_notifies_systemd_and_stops_cleanly(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> None:
    camera_dir = make_camera_dir(tmp_path)
    video = build_sample_video(tmp_path / "sample.mp4")
    config = write_config(tmp_path, broker, shm_root, camera_dir, video, engine_seed=engine_seed)
    device = device_of(config)
    subscriber = Subscriber(broker, f"appliance/{device}/#")
    daemon = RunningDaemon(tmp_path, config, REPO)

    def per_camera() -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {"line1": [], "line2": []}
        for m in subscriber.of_type("detections"):
            found[m["camera_id"]].append(m)
        return found

    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: min(map(len, per_camera().values())) >= 7, 120, "7 detections from each camera")
        by_camera = per_camera()
        detections = by_camera["line1"] + by_camera["line2"]
        stubs = children_of(daemon.process.pid)
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()

    schema = load_schema("detections")
    for message in detections:
        jsonschema.validate(message, schema)
    # Every frame shows what its image shows. line1: seq k is image (k-1) % 3 of the folder. line2: the sample
    # video plays each darknet image for FRAMES_PER_IMAGE frames, one frame per capture seq (paced, none skipped).
    for message in detections:
        if message["camera_id"] == "line1":
            image, expected = IMAGES_IN_ORDER[(message["seq"] - 1) % 3]
        else:
            image = SAMPLE_IMAGES[(message["seq"] - 1) // FRAMES_PER_IMAGE % len(SAMPLE_IMAGES)]
            expected = SAMPLE_EXPECTED.get(image)
            if expected is None:
                continue
        names = {d["class_name"] for d in message["detections"]}
        assert expected in names, (f"{message['camera_id']} frame {message['seq']} ({image}): expected a "
                                   f"{expected}, got {names}")
        assert message["image"] == {"width": 640, "height": 480}
        for d in message["detections"]:
            box = d["box"]
            assert 0 <= box["x1"] <= box["x2"] <= 640 and 0 <= box["y1"] <= box["y2"] <= 480
    for camera, messages in by_camera.items():
        seqs = [m["seq"] for m in messages]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), camera

    log = (tmp_path / "daemon.log").read_text()
    assert "detector layout: 2 detector instance(s)" in log and "offering 8 fps, model.detector_instances set" in log
    assert "3 request(s) in flight at most (enough to keep it busy)" in log
    fields = daemon.notify.fields()
    assert any(f.startswith("STATUS=") and "cameras streaming" in f for f in fields)
    assert "STOPPING=1" in fields and "WATCHDOG=1" in fields
    statuses = subscriber.of_type("device_status")
    assert statuses and statuses[-1]["state"] == "offline"
    camera_states = [m["state"] for m in subscriber.of_type("camera_status")]
    assert "streaming" in camera_states
    # Nothing left behind: no model processes (an exiting stub may take a moment to go), no frame rings.
    wait_until(lambda: not [pid for pid in stubs if running(pid)], 5, 0.05, "the model processes to exit")
    assert list(shm_root.iterdir()) == []


def test_invalid_config_exits_2_and_names_the_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("device: {id: x}\ncameras: []\nmqtt: {host: localhost, prot: 1883}\n")
    result = run_appliance("run", "--config", str(config), expect=2)
    assert f"{config}:2: cameras:" in result.stderr
    assert f"{config}:3: mqtt.prot: unknown key" in result.stderr


def test_a_killed_capture_process_is_restarted_and_the_camera_recovers(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> None:
    camera_dir = make_camera_dir(tmp_path)
    config = write_config(tmp_path, broker, shm_root, camera_dir, engine_seed=engine_seed)
    device = device_of(config)
    subscriber = Subscriber(broker, f"appliance/{device}/line1/detections")
    daemon = RunningDaemon(tmp_path, config, REPO)

    def capture_pids() -> list[int]:
        return [int(line.split("capture process ")[1].split()[0]) for line in daemon.log_path.read_text().splitlines()
                if "'line1': capture process " in line and line.rstrip().endswith("started")]

    try:
        daemon.wait(lambda: len(subscriber.of_type("detections")) >= 3, 240, "first detections")
        first = capture_pids()[-1]
        os.kill(first, signal.SIGKILL)
        killed_at = len(subscriber.of_type("detections"))
        daemon.wait(lambda: len(capture_pids()) >= 2, 60, "a new capture process")
        daemon.wait(lambda: len(subscriber.of_type("detections")) >= killed_at + 3, 60, "detections after the restart")
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()
    assert capture_pids()[-1] != first
    # one camera at 4 fps leaves one instance on every core time to spare: the lowest-latency layout, chosen from
    # the engine's build-time timing (modelrepo.layout)
    assert re.search(r"detector layout: 1 detector instance\(s\) x all cores, .* offering 4 fps, "
                     r"[\d.]+ ms per frame on every core\); 2 request\(s\) in flight", daemon.log_path.read_text())
    seqs = [m["seq"] for m in subscriber.of_type("detections")]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # the ring's sequence goes on after the restart
    assert not running(first)
