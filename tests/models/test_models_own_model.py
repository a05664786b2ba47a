"""Your own model, as docs/models.md walks through it: an ONNX with a YOLOv5-style head and one with a
YOLOv8/YOLO11-style head, each with its model profile, signed into an OTA bundle, dropped into the device's inbox
with `appliance ota push --inbox`, built and switched to by the running appliance (`appliance run`, a real broker,
the real detector), and its detections on a real image equal to what OpenCV's own darknet loader finds there.

The YOLOv5-style model is the bundled detector (its head is YOLOv5's layout: rows of box, objectness, class
scores); the YOLOv8-style one is made from it by graph surgery (write_v8_adapter: [N, 84, boxes], box rows then
class-score rows). The camera is a folder with one image and no width/height: the ring takes the image's own size,
so the reference runs on exactly the pixels the appliance saw."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from models_reference import assert_same_detections, write_v8_adapter
from support.daemon import RunningDaemon
from support.engineseed import seed_state_dir
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber

from appliance.fleet.bundle import build_bundle
from appliance.ota.signing import generate_keypair

REPO = Path(__file__).resolve().parents[2]
IMAGE = Path("/usr/share/darknet/data/dog.jpg")

pytestmark = [pytest.mark.slow]


def _bundle(tmp_path: Path, onnx: Path, model: str, version: str, head_layout: str, key: Path) -> Path:
    """The bundle an operator makes for their model: bundle.yaml names the model, its version and both profiles."""
    src = tmp_path / f"{model}-src"
    src.mkdir()
    shutil.copy(onnx, src / "model.onnx")
    profile = yaml.safe_load((REPO / "repository/profiles/yolov3-tiny.yaml").read_text())
    profile["name"] = model
    profile["head"]["layout"] = head_layout
    engine = yaml.safe_load((REPO / "engines/yolov3-tiny.yaml").read_text())
    engine["model"] = model
    engine["verify"]["samples"] = 1  # keeps the on-device build short
    (src / "bundle.yaml").write_text(yaml.safe_dump({
        "model": model, "version": version, "min_appliance_version": "0.1.0", "onnx": "model.onnx",
        "model_profile": profile, "engine_profile": engine}, sort_keys=False))
    out = tmp_path / f"{model}-{version}.bundle"
    build_bundle(src, key, out)
    return out


def _config(tmp_path: Path, broker: Mosquitto, shm_root: Path, camera_dir: Path) -> Path:
    path = tmp_path / "appliance.yaml"
    path.write_text(f"""
device: {{id: own-model}}
paths: {{state_dir: {tmp_path / 'state'}, shm_root: {shm_root}}}
cameras:
  - id: Dock-1
    source: {{type: images, path: {camera_dir}, loop: true, realtime: true}}
    fps: 2
mqtt: {{host: 127.0.0.1, port: {broker.port}}}
health: {{port: 0}}
ota:
  trusted_keys: [{tmp_path / 'ota.pub'}]
  inbox: {tmp_path / 'inbox'}
  inbox_poll_s: 0.5
  health: {{period_s: 3, check_interval_s: 0.2, min_requests: 2, max_latency_ratio: 50}}
""")
    return path


def _push(bundle: Path, inbox: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "appliance", "ota", "push", str(bundle), "--inbox", str(inbox)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr


def _served(sub: Subscriber, model: str, version: str, since: float) -> list[dict[str, Any]]:
    return [p for p in sub.of_type("detections", since)
            if p["model"]["name"] == model and p["model"]["version"] == version]


def test_own_models_with_v5_and_v8_heads_arrive_by_ota_and_detect_what_the_reference_does(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path, detector_dir: Path,
        reference: Any, images: dict[str, np.ndarray]) -> None:
    camera_dir = tmp_path / "camera"
    camera_dir.mkdir()
    shutil.copy(IMAGE, camera_dir / IMAGE.name)
    (tmp_path / "inbox").mkdir()
    generate_keypair(tmp_path / "ota.key", tmp_path / "ota.pub")
    write_v8_adapter(detector_dir / "model.onnx", tmp_path / "v8.onnx")
    bundles = [(_bundle(tmp_path, tmp_path / "v8.onnx", "my-yolov8", "2", "channels_first", tmp_path / "ota.key"),
                "my-yolov8", "2"),
               (_bundle(tmp_path, detector_dir / "model.onnx", "my-yolov5", "3", "rows_with_objectness",
                        tmp_path / "ota.key"), "my-yolov5", "3")]
    config = _config(tmp_path, broker, shm_root, camera_dir)
    seed_state_dir(tmp_path / "state", engine_seed)
    expected = reference.detect(images["dog"], score=0.25, iou=0.45)
    assert len(expected) >= 3  # dog, bicycle, truck at least: a comparison that can fail
    with Subscriber(broker, "appliance/own-model/#") as sub:
        daemon = RunningDaemon(tmp_path, config, REPO)
        try:
            assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
            for bundle, model, version in bundles:
                since = time.monotonic()
                _push(bundle, tmp_path / "inbox")
                daemon.wait(lambda: [p for p in sub.of_type("ota_status", since) if p.get("version") == version
                                     and p["state"] in ("active", "rejected", "rolled_back")], 300,
                            f"the outcome of {model} {version}")
                outcome = [p for p in sub.of_type("ota_status", since) if p.get("version") == version][-1]
                assert outcome["state"] == "active", outcome
                daemon.wait(lambda: _served(sub, model, version, since), 60, f"detections of {model}")
                payload = _served(sub, model, version, since)[-1]
                assert payload["image"] == {"width": 768, "height": 576}  # dog.jpg's own size: no width/height
                found = payload["detections"]
                assert_same_detections(
                    expected, np.array([[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in found]),
                    np.array([d["score"] for d in found]), np.array([d["class_id"] for d in found]),
                    box_tol=1.0, score_tol=1e-3)
        finally:
            code = daemon.terminate()
            daemon.close()
    assert code == 0, daemon.tail()
