"""A fleet rollout through real daemons: three `appliance run` processes (each with its embedded Triton, the real
detector and an images camera at 1 fps) on one shared mosquitto, in groups `canary` (one) and `line` (two), and the
real `appliance ota rollout` CLI, the bundle downloaded over real HTTP.

The canary's device-local golden set expects a person the detector does not see: the rollout stops there, the
canary keeps its base model and the line devices are never asked (their detections stay on the base model). Once
the golden set is fixed, a rollout under a new id goes through both groups and every daemon's detections come
from version 3."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import cv2
import numpy as np
import pytest
from support.bundleserver import serve_directory
from support.cli import run_appliance
from support.daemon import RunningDaemon, device_of, make_camera_dir, write_config
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber

from appliance.harness.bundle import detector_bundle
from appliance.ota.signing import generate_keypair
from appliance.ota.store import OtaStore

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]

FLEET = (("can-1", "canary"), ("line-1", "line"), ("line-2", "line"))


class Watch(Subscriber):
    """The newest message per topic under the default prefix."""

    def __init__(self, broker: Mosquitto) -> None:
        super().__init__(broker, "appliance/#")

    @property
    def latest(self) -> dict[str, dict[str, Any]]:
        return {m.topic: m.json() for m in self.messages if m.is_json}  # snapshots are JPEG

    def served(self, device: str) -> str | None:
        """The model version of the device's newest detections message."""
        doc = self.latest.get(f"appliance/{device}/line1/detections")
        return doc["model"]["version"] if doc else None

    def newest_seq(self, device: str) -> int:
        """The frame seq of the device's newest detections message (-1 before the first)."""
        doc = self.latest.get(f"appliance/{device}/line1/detections")
        return doc["seq"] if doc else -1


@pytest.fixture
def fleet(tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> Iterator[dict[str, Any]]:
    keys = tmp_path / "keys"
    generate_keypair(keys / "ota.key", keys / "ota.pub")
    camera_dir = make_camera_dir(tmp_path)
    golden = tmp_path / "golden-can-1"
    golden.mkdir()
    cv2.imwrite(str(golden / "wall.png"), np.full((480, 640, 3), 128, np.uint8))
    (golden / "golden.json").write_text(json.dumps({"frames": [{"file": "wall.png", "expected": [
        {"class_name": "person", "score": 0.9, "box": [100, 100, 300, 400]}]}]}))  # a grey wall: nobody there
    daemons: dict[str, RunningDaemon] = {}
    watch = Watch(broker)
    try:
        for name, group in FLEET:
            home = tmp_path / name
            home.mkdir()
            config = write_config(home, broker, shm_root / name, camera_dir,  # its own rings: cameras share ids
                                  engine_seed=engine_seed)
            text = config.read_text().replace(f"device: {{id: {device_of(config)}}}", f"device: {{id: {name}}}")
            text = text.replace("fps: 4", "fps: 1")
            text += (f"ota:\n  group: {group}\n  trusted_keys: [{keys / 'ota.pub'}]\n  allow_http: true\n"
                     f"  health: {{period_s: 3}}\n"
                     + (f"  device_golden_dir: {golden}\n" if name == "can-1" else ""))
            config.write_text(text)
            (shm_root / name).mkdir()
            daemons[name] = RunningDaemon(home, config, REPO)
        began = time.monotonic()
        for name, daemon in daemons.items():
            daemon.wait(lambda: daemon.notify.wait_for("READY=1", 0.1), 300, f"{name} ready")
            daemon.wait(lambda: watch.served(name) == "base", 60, f"{name} detections")
        print(f"{len(daemons)} daemons ready in {time.monotonic() - began:.1f} s")
        yield {"keys": keys, "daemons": daemons, "watch": watch, "golden": golden, "tmp": tmp_path}
    finally:
        watch.close()
        for daemon in daemons.values():
            if daemon.process.poll() is None:
                daemon.process.terminate()
        for daemon in daemons.values():
            try:
                daemon.process.wait(90)
            except subprocess.TimeoutExpired:
                pass
            daemon.close()
        for name, _ in FLEET:
            rings = shm_root / name
            if rings.exists():
                assert not list(rings.iterdir()), f"{name} left frame rings behind"
                rings.rmdir()


def rollout(port: int, keys: Path, bundle: Path, url: str, rollout_id: str) -> subprocess.CompletedProcess[str]:
    began = time.monotonic()
    done = run_appliance("ota", "rollout", "--bundle", str(bundle), "--url", url, "--sign-key", str(keys / "ota.key"),
                         "--mqtt", f"127.0.0.1:{port}", "--group", "canary", "--group", "line", "--soak", "5",
                         "--timeout", "300", "--rollout-id", rollout_id, timeout=600, expect=None)
    print(f"rollout {rollout_id}: {time.monotonic() - began:.1f} s, rc={done.returncode}\n{done.stdout}{done.stderr}")
    return done


def test_a_rollout_stops_at_the_canary_that_fails_its_golden_frames_then_goes_through_once_fixed(
        fleet, broker: Mosquitto) -> None:
    tmp, keys, watch, daemons = fleet["tmp"], fleet["keys"], fleet["watch"], fleet["daemons"]
    served = tmp / "served"
    served.mkdir()
    for version in ("2", "3"):
        shutil.copy(detector_bundle(tmp, keys / "ota.key", version), served / f"model-{version}.bundle")
    with serve_directory(served) as base_url:
        stopped = rollout(broker.port, keys, served / "model-2.bundle", f"{base_url}/model-2.bundle", "fleet-2")
        assert stopped.returncode == 1, stopped.stderr
        assert "stopped: group canary: can-1 failed (rejected golden_mismatch:" in stopped.stdout
        assert "group line: desired state" not in stopped.stdout
        status = watch.latest["appliance/can-1/ota/status"]
        assert (status["state"], status["code"], status["rollout_id"]) == ("rejected", "golden_mismatch", "fleet-2")
        # Fresh detections from every daemon after the refusal still come from what each served before.
        refused_at = {n: watch.newest_seq(n) for n, _ in FLEET}
        for name, _ in FLEET:
            daemons[name].wait(lambda: watch.newest_seq(name) > refused_at[name], 30,  # called at once: name is current
                               f"{name} detections after the refusal")
        assert [watch.served(n) for n, _ in FLEET] == ["base", "base", "base"]
        assert [OtaStore(tmp / n / "state").read_pointer().version for n, _ in FLEET] == [None, None, None]
        assert "appliance/line-1/ota/status" not in watch.latest

        (fleet["golden"] / "golden.json").write_text(json.dumps({"frames": [{"file": "wall.png", "expected": []}]}))
        done = rollout(broker.port, keys, served / "model-3.bundle", f"{base_url}/model-3.bundle", "fleet-3")
        assert done.returncode == 0, done.stderr
        for name, daemon in daemons.items():
            daemon.wait(lambda: watch.served(name) == "3", 30, f"{name} detections from version 3")
        assert [OtaStore(tmp / n / "state").read_pointer().version for n, _ in FLEET] == ["3", "3", "3"]
        assert all(watch.latest[f"appliance/{n}/ota/status"]["rollout_id"] == "fleet-3" for n, _ in FLEET)
