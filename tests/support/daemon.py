"""Helpers for tests that run `appliance run` as a real process: a folder of real images for an `images` camera,
the config that ties them together (a real broker and a private /dev/shm root) and the daemon reporting to a
notify socket (appliance.harness.notify). What it publishes is read with support.subscriber."""

from __future__ import annotations

import shutil
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Callable, Sequence

from appliance.harness.notify import NotifySocket
from support.cli import appliance_argv, appliance_env
from support.engineseed import seed_state_dir
from support.mosquitto import Mosquitto
from support.provisioned import DARKNET_IMAGES
from support.wait import wait_until

# Played in name order, so frame seq k shows IMAGES_IN_ORDER[(k - 1) % 3].
IMAGES_IN_ORDER = [("dog.jpg", "dog"), ("eagle.jpg", "bird"), ("horses.jpg", "horse")]


def make_camera_dir(tmp_path: Path) -> Path:
    """A folder holding IMAGES_IN_ORDER, for an `images` camera."""
    camera_dir = tmp_path / "camera"
    camera_dir.mkdir()
    for name, _ in IMAGES_IN_ORDER:
        shutil.copy(DARKNET_IMAGES / name, camera_dir / name)
    return camera_dir


def device_of(config: Path) -> str:
    """The device id a config written by write_config names (its MQTT topic level)."""
    return next(line.split("id: ")[1].rstrip("}") for line in config.read_text().splitlines() if "device:" in line)


def write_config(tmp_path: Path, broker: Mosquitto, shm_root: Path, camera_dir: Path,
                 video: Path | None = None, *, loop: bool = True, line1_keys: str = "", health_port: int = 0,
                 engine_seed: Path | None = None, sizeless: Path | None = None) -> Path:
    """Camera line1 plays ``camera_dir`` (again and again unless ``loop`` is false; ``line1_keys``: more of its
    keys, a `key: value` line each); with ``video``, camera line2 plays it and the detector runs two instances (other
    daemon tests use one camera and the automatic layout: one instance at 4 fps). With ``engine_seed`` (the
    ``engine_seed`` fixture) the state directory starts with the run's engine, so the start is not a first boot.
    With ``sizeless``, camera line3 plays that video with no width/height configured (the source's own size),
    its source asked again at least every 2 s while it is absent."""
    device = f"e2e{uuid.uuid4().hex[:6]}"
    line2 = "" if video is None else f"""
  - id: line2
    source: {{type: file, path: {video}, loop: true, realtime: true}}
    width: 640
    height: 480
    fps: 4"""
    line3 = "" if sizeless is None else f"""
  - id: line3
    source: {{type: file, path: {sizeless}, loop: true, realtime: true}}
    fps: 2
    backoff: {{max_s: 2.0}}"""
    model = "" if video is None else "\nmodel: {detector_instances: 2}"
    extra = "".join(f"\n    {line}" for line in line1_keys.splitlines())
    path = tmp_path / "appliance.yaml"
    path.write_text(f"""
device: {{id: {device}}}{model}
paths:
  state_dir: {tmp_path / 'state'}
  shm_root: {shm_root}
cameras:
  - id: line1
    source: {{type: images, path: {camera_dir}, loop: {str(loop).lower()}, realtime: true}}
    width: 640
    height: 480
    resize: true
    fps: 4{extra}{line2}{line3}
mqtt:
  host: 127.0.0.1
  port: {broker.port}
health:
  port: {health_port}
""")
    if engine_seed is not None:
        seed_state_dir(tmp_path / "state", engine_seed)
    return path


class RunningDaemon:
    """`appliance run --config CONFIG` as a real process reporting to a notify socket, its output in a log file."""

    def __init__(self, tmp_path: Path, config: Path, cwd: Path, global_args: Sequence[str] = ()) -> None:
        """``global_args``: options before ``run``, e.g. ``["--log-level", "DEBUG"]``."""
        self.notify = NotifySocket(tmp_path / "notify.sock")
        self.log_path = tmp_path / "daemon.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            appliance_argv(*global_args, "run", "--config", str(config)), stdout=self._log,
            stderr=subprocess.STDOUT, cwd=cwd,
            env=appliance_env({"NOTIFY_SOCKET": str(self.notify.path), "PYTHONFAULTHANDLER": "1"}))

    def tail(self) -> str:
        return self.log_path.read_text()[-3000:]

    def wait(self, predicate: Callable[[], object], timeout: float, what: str) -> None:
        """Poll ``predicate`` until it holds; fail with the log's tail if the daemon exits or time runs out."""
        def alive_and_done() -> object:
            code = self.process.poll()
            assert code is None, f"the daemon exited with code {code} while waiting for {what}"
            return predicate()

        try:
            wait_until(alive_and_done, timeout, 0.2, what)
        except AssertionError as failed:
            raise AssertionError(f"{failed}\n{self.tail()}") from None

    def terminate(self, timeout: float = 90) -> int:
        """SIGTERM, as systemd stops it; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()
        self.notify.close()
