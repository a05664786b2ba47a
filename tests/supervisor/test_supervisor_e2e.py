"""The daemon end to end: `appliance run` as a real process with a real notify socket, a real broker, the real
detector and two cameras (a folder of real images, and the sample video made from them; on a CPU host with two
detector instances, so that a camera's frames can finish out of order and must still be published in order).
Truth comes from what the images show (Debian's darknet test images: a dog, an eagle, horses, a giraffe), not
from the code under test."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import jsonschema
import paho.mqtt.client as paho
import pytest
from support.mosquitto import Mosquitto
from support.shm import private_shm_dir

from appliance.capture.sample import SAMPLE_IMAGES, build_sample_video
from appliance.mqtt.schema import load_schema

REPO = Path(__file__).resolve().parents[2]
IMAGES = Path("/usr/share/darknet/data")
# Played in name order, so frame seq k shows IMAGES_IN_ORDER[(k - 1) % 3].
IMAGES_IN_ORDER = [("dog.jpg", "dog"), ("eagle.jpg", "bird"), ("horses.jpg", "horse")]
# The sample video (appliance.capture.sample) at its defaults: 10 fps, 2 s per image.
FRAMES_PER_IMAGE = 20
SAMPLE_EXPECTED = {"dog": "dog", "eagle": "bird", "giraffe": "giraffe", "horses": "horse"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (IMAGES / "dog.jpg").exists(), reason="needs Debian's darknet test images"),
    pytest.mark.skipif(not (REPO / ".models/yolov3-tiny/model.onnx").exists(), reason="run scripts/setup.sh"),
]


class NotifySocket:
    """The systemd side of sd_notify: collects every datagram the daemon sends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self.sock.recv(65536).decode())
            except socket.timeout:
                continue

    def fields(self) -> list[str]:
        return [line for m in list(self.messages) for line in m.splitlines()]

    def wait_for(self, line: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.fields():
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


class Subscriber:
    def __init__(self, port: int, topic: str) -> None:
        self.messages: list[tuple[str, dict, bool]] = []
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"test-{uuid.uuid4().hex[:8]}")
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, json.loads(m.payload), m.retain))
        self.client.connect("127.0.0.1", port)
        self.client.subscribe(topic, qos=1)
        self.client.loop_start()

    def of_type(self, kind: str) -> list[dict]:
        return [payload for _topic, payload, _retain in list(self.messages) if payload.get("type") == kind]

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with Mosquitto(tmp_path / "broker") as b:
        yield b


@pytest.fixture
def shm_root() -> Iterator[Path]:
    yield from private_shm_dir("appliance-e2e", check_leaks=False)


def _camera_dir(tmp_path: Path) -> Path:
    """A folder holding IMAGES_IN_ORDER, for an `images` camera."""
    camera_dir = tmp_path / "camera"
    camera_dir.mkdir()
    for name, _ in IMAGES_IN_ORDER:
        shutil.copy(IMAGES / name, camera_dir / name)
    return camera_dir


def _device_of(config: Path) -> str:
    """The device id a config written by _config names (its MQTT topic level)."""
    return next(line.split("id: ")[1].rstrip("}") for line in config.read_text().splitlines() if "device:" in line)


def _config(tmp_path: Path, broker: Mosquitto, shm_root: Path, camera_dir: Path, video: Path | None = None) -> Path:
    """Camera line1 plays ``camera_dir``; with ``video``, camera line2 plays it and the detector runs two instances
    (other daemon tests use one camera and the automatic layout: one instance at 4 fps)."""
    device = f"e2e{uuid.uuid4().hex[:6]}"
    line2 = "" if video is None else f"""
  - id: line2
    source: {{type: file, path: {video}, loop: true, realtime: true}}
    width: 640
    height: 480
    fps: 4"""
    model = "" if video is None else "\nmodel: {detector_instances: 2}"
    path = tmp_path / "appliance.yaml"
    path.write_text(f"""
device: {{id: {device}}}{model}
paths:
  state_dir: {tmp_path / 'state'}
  shm_root: {shm_root}
cameras:
  - id: line1
    source: {{type: images, path: {camera_dir}, loop: true, realtime: true}}
    width: 640
    height: 480
    resize: true
    fps: 4{line2}
mqtt:
  host: 127.0.0.1
  port: {broker.port}
health:
  port: 0
""")
    return path


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited child waits for PID 1 to reap it; that is not a leak)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _kill_if_running(daemon: subprocess.Popen) -> None:
    """Teardown after a failed assertion left the daemon running: SIGKILL it and reap it."""
    if daemon.poll() is None:
        daemon.kill()
        daemon.wait()


def _children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def test_daemon_publishes_correct_detections_notifies_systemd_and_stops_cleanly(
        tmp_path: Path, broker: Mosquitto, shm_root: Path) -> None:
    camera_dir = _camera_dir(tmp_path)
    video = build_sample_video(tmp_path / "sample.mp4")
    config = _config(tmp_path, broker, shm_root, camera_dir, video)
    device = _device_of(config)
    notify = NotifySocket(tmp_path / "notify.sock")
    subscriber = Subscriber(broker.port, f"appliance/{device}/#")
    env = {**os.environ, "NOTIFY_SOCKET": str(notify.path), "PYTHONFAULTHANDLER": "1"}
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen([sys.executable, "-m", "appliance", "run", "--config", str(config)],
                              stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        assert notify.wait_for("READY=1", 240), (tmp_path / "daemon.log").read_text()[-3000:]
        deadline = time.monotonic() + 120
        def per_camera() -> dict[str, list[dict]]:
            found: dict[str, list[dict]] = {"line1": [], "line2": []}
            for m in subscriber.of_type("detections"):
                found[m["camera_id"]].append(m)
            return found

        while min(map(len, per_camera().values())) < 7 and time.monotonic() < deadline:
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            time.sleep(0.2)
        by_camera = per_camera()
        assert min(map(len, by_camera.values())) >= 7, (tmp_path / "daemon.log").read_text()[-3000:]
        detections = by_camera["line1"] + by_camera["line2"]
        stubs = _children_of(daemon.pid)

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=90) == 0, (tmp_path / "daemon.log").read_text()[-3000:]
    finally:
        _kill_if_running(daemon)
        log.close()
        subscriber.close()
        notify.close()

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
    fields = notify.fields()
    assert any(f.startswith("STATUS=") and "cameras streaming" in f for f in fields)
    assert "STOPPING=1" in fields and "WATCHDOG=1" in fields
    statuses = subscriber.of_type("device_status")
    assert statuses and statuses[-1]["state"] == "offline"
    camera_states = [m["state"] for m in subscriber.of_type("camera_status")]
    assert "streaming" in camera_states
    # Nothing left behind: no model processes, no frame rings.
    time.sleep(0.5)
    assert [pid for pid in stubs if _running(pid)] == []
    assert list(shm_root.iterdir()) == []


def test_invalid_config_exits_2_and_names_the_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("device: {id: x}\ncameras: []\nmqtt: {host: localhost, prot: 1883}\n")
    result = subprocess.run([sys.executable, "-m", "appliance", "run", "--config", str(config)],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert f"{config}:2: cameras:" in result.stderr
    assert f"{config}:3: mqtt.prot: unknown key" in result.stderr


def test_a_killed_capture_process_is_restarted_and_the_camera_recovers(
        tmp_path: Path, broker: Mosquitto, shm_root: Path) -> None:
    camera_dir = _camera_dir(tmp_path)
    config = _config(tmp_path, broker, shm_root, camera_dir)
    device = _device_of(config)
    subscriber = Subscriber(broker.port, f"appliance/{device}/line1/detections")
    log_path = tmp_path / "daemon.log"
    log = log_path.open("w")
    daemon = subprocess.Popen([sys.executable, "-m", "appliance", "run", "--config", str(config)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    def capture_pids() -> list[int]:
        return [int(line.split("capture process ")[1].split()[0]) for line in log_path.read_text().splitlines()
                if "'line1': capture process " in line and line.rstrip().endswith("started")]

    def wait(predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert daemon.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{what}: " + log_path.read_text()[-3000:]
            time.sleep(0.2)

    try:
        wait(lambda: len(subscriber.of_type("detections")) >= 3, 240, "first detections")
        first = capture_pids()[-1]
        os.kill(first, signal.SIGKILL)
        killed_at = len(subscriber.of_type("detections"))
        wait(lambda: len(capture_pids()) >= 2, 60, "a new capture process")
        wait(lambda: len(subscriber.of_type("detections")) >= killed_at + 3, 60, "detections after the restart")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=90) == 0, log_path.read_text()[-3000:]
    finally:
        _kill_if_running(daemon)
        log.close()
        subscriber.close()
    assert capture_pids()[-1] != first
    # one camera at 4 fps leaves one instance on every core time to spare: the lowest-latency layout, chosen from
    # the engine's build-time timing (modelrepo.layout)
    assert re.search(r"detector layout: 1 detector instance\(s\) x all cores, .* offering 4 fps, "
                     r"[\d.]+ ms per frame on every core\); 2 request\(s\) in flight", log_path.read_text())
    seqs = [m["seq"] for m in subscriber.of_type("detections")]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # the ring's sequence goes on after the restart
    assert not _running(first)
