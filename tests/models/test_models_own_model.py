"""Your own model, as docs/models.md walks through it: an ONNX with a YOLOv5-style head and one with a
YOLOv8/YOLO11-style head, each with its model profile, signed into an OTA bundle, dropped into the device's inbox
with `appliance ota push --inbox`, built and switched to by the running appliance (`appliance run`, a real broker,
the real detector), and its detections on a real image equal to what OpenCV's own darknet loader finds there.
The YOLOv5-style bundle names its classes its own way (dog is ``hound``): the camera's class filter names only
``hound``, which the base model lacks (a warning; nothing is counted), so events and counts start with the switch,
under the new name, and go on after a restart, which check-config on that device accepts.

The YOLOv5-style model is the bundled detector (its head is YOLOv5's layout: rows of box, objectness, class
scores); the YOLOv8-style one is made from it by graph surgery (write_v8_adapter: [N, 84, boxes], box rows then
class-score rows). The camera is a folder with one image and no width/height: the ring takes the image's own size,
so the reference runs on exactly the pixels the appliance saw."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from models_reference import assert_same_detections, write_v8_adapter
from support.cli import run_appliance
from support.daemon import RunningDaemon
from support.engineseed import seed_state_dir
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber

from appliance.fleet.bundle import build_bundle
from appliance.ota.signing import generate_keypair

REPO = Path(__file__).resolve().parents[2]
IMAGE = Path("/usr/share/darknet/data/dog.jpg")

pytestmark = [pytest.mark.slow]


OWN_NAMES = {"dog": "hound", "bicycle": "bike", "truck": "vehicle", "person": "worker"}


def _bundle(tmp_path: Path, onnx: Path, model: str, version: str, head_layout: str, key: Path,
            renamed: dict[str, str] | None = None) -> Path:
    """The bundle an operator makes for their model: bundle.yaml names the model, its version and both profiles;
    ``renamed``: class names of its own in place of COCO's."""
    src = tmp_path / f"{model}-src"
    src.mkdir()
    shutil.copy(onnx, src / "model.onnx")
    profile = yaml.safe_load((REPO / "repository/profiles/yolov3-tiny.yaml").read_text())
    profile["name"] = model
    profile["head"]["layout"] = head_layout
    profile["classes"] = [(renamed or {}).get(name, name) for name in profile["classes"]]
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
    analytics:
      classes: {{hound: 0.25}}
      anchor: center
      zones: [{{name: yard, units: normalized, points: [[0, 0], [1, 0], [1, 1], [0, 1]],
               hysteresis: {{margin: 0, frames: 1}}}}]
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
    run_appliance("ota", "push", str(bundle), "--inbox", str(inbox))


def _served(sub: Subscriber, model: str, version: str, since: float) -> list[dict[str, Any]]:
    return [p for p in sub.of_type("detections", since)
            if p["model"]["name"] == model and p["model"]["version"] == version]


def _cuda_lines(log: Path) -> list[str]:
    """Lines about CUDA in a daemon's log: on this CPU host only the one INFO line that Triton's CUDA messages
    are left out."""
    return [line for line in log.read_text().splitlines() if "cuda" in line.lower()]


def _check_config(config: Path, *flags: str) -> dict[str, Any]:
    done = run_appliance("check-config", str(config), "--json", *flags, expect=None)
    return json.loads(done.stdout)


def _class_warnings(report: dict[str, Any]) -> list[str]:
    return [w["key"] for w in report["warnings"] if ".classes." in w["key"]]


def _events_of(sub: Subscriber, since: float) -> list[dict[str, Any]]:
    return sub.of_type("event", since)


def _install_each(daemon: RunningDaemon, sub: Subscriber, tmp_path: Path, bundles: list[tuple[Path, str, str]],
                  expected: Any) -> None:
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
        names = {d["class_id"]: d["class_name"] for d in found}
        assert names[16] == ("hound" if model == "my-yolov5" else "dog"), names


def _hound_enters(daemon: RunningDaemon, sub: Subscriber, since: float) -> None:
    """The dog, named hound, enters the yard: an event and counts, with the new name."""
    daemon.wait(lambda: [e for e in _events_of(sub, since) if e["event"] == "enter"], 60, "the hound's enter event")
    enter = [e for e in _events_of(sub, since) if e["event"] == "enter"][0]
    assert (enter["class_name"], enter["class_id"], enter["zone"]) == ("hound", 16, "yard"), enter
    daemon.wait(lambda: [c for c in sub.of_type("counts", since) if c["zones"]["yard"]["entered"] >= 1], 30,
                "the yard's counts")


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
                        tmp_path / "ota.key", OWN_NAMES), "my-yolov5", "3")]
    config = _config(tmp_path, broker, shm_root, camera_dir)
    seed_state_dir(tmp_path / "state", engine_seed)
    expected = reference.detect(images["dog"], score=0.25, iou=0.45)
    assert len(expected) >= 3  # dog, bicycle, truck at least: a comparison that can fail
    base = _check_config(config)
    assert base["ok"] and _class_warnings(base) == ["cameras.0.analytics.classes.hound"], base
    with Subscriber(broker, "appliance/own-model/#") as sub:
        daemon = RunningDaemon(tmp_path, config, REPO)
        try:
            assert daemon.notify.wait_for("READY=1", 240), daemon.tail()  # hound is unknown: a warning, it runs
            _install_each(daemon, sub, tmp_path, bundles[:1], expected)
            assert _events_of(sub, 0) == []  # the filter's one class is not the served model's: nothing counts
            since = time.monotonic()
            _install_each(daemon, sub, tmp_path, bundles[1:], expected)
            _hound_enters(daemon, sub, since)
        finally:
            code = daemon.terminate()
            daemon.close()
        assert code == 0, daemon.tail()
        served = _check_config(config)
        assert served["ok"] and _class_warnings(served) == [], served  # the device serves hound now
        assert _class_warnings(_check_config(config, "--no-machine")) == ["cameras.0.analytics.classes.hound"]
        (tmp_path / "restart").mkdir()
        since = time.monotonic()
        daemon = RunningDaemon(tmp_path / "restart", config, REPO)
        try:
            assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
            daemon.wait(lambda: _served(sub, "my-yolov5", "3", since), 60, "detections after the restart")
            _hound_enters(daemon, sub, since)
        finally:
            code = daemon.terminate()
            daemon.close()
    assert code == 0, daemon.tail()
    for log in (tmp_path / "daemon.log", tmp_path / "restart" / "daemon.log"):  # starts and OTA switches
        noted = _cuda_lines(log)
        assert len(noted) == 1 and " INFO " in noted[0] and "runs on the CPU" in noted[0], noted
