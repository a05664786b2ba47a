"""First-boot INT8 calibration frames from the device's own camera: `appliance run` as a real process (a real
broker, an `images` camera, the real detector) with an engine profile asking for ``calibration.device_frames: 2``
keeps two distinct JPEGs of its camera's frames in ``<state>/calibration/<model>/``, says what happens next, and
the next int8 build's calibration set (and so its fingerprint) includes them."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.daemon import RunningDaemon, write_config
from support.mosquitto import Mosquitto
from support.provisioned import DARKNET_IMAGES

from appliance.detector.buildprofile import load_profile
from appliance.detector.calibration.frames import read_frames
from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder
from appliance.detector.engines.fingerprint import DeviceProbe
from appliance.detector.engines.manager import EngineManager

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),  # fail, not skip, without them (tests/conftest.py)
]


def _engines_dir(tmp_path: Path) -> Path:
    """The shipped detector profile, asking for two camera frames at least 0.5 s apart."""
    text = (REPO / "engines" / "yolov3-tiny.yaml").read_text()
    assert "  device_frames: 0 " in text and "  device_spread_s: 30 " in text
    text = text.replace("  device_frames: 0 ", "  device_frames: 2 #").replace("  device_spread_s: 30 ",
                                                                            "  device_spread_s: 0.5 #")
    engines = tmp_path / "engines"
    engines.mkdir()
    (engines / "yolov3-tiny.yaml").write_text(text)
    return engines


def test_the_running_appliance_keeps_camera_frames_for_the_next_int8_build(tmp_path: Path, shm_root: Path) -> None:
    broker = Mosquitto(tmp_path / "broker").start()
    camera_dir = tmp_path / "camera"
    camera_dir.mkdir()
    for name in ("dog.jpg", "eagle.jpg", "giraffe.jpg"):  # three scenes: two kept frames must differ
        shutil.copy(DARKNET_IMAGES / name, camera_dir / name)
    engines = _engines_dir(tmp_path)
    config = write_config(tmp_path, broker, shm_root, camera_dir)
    config.write_text(config.read_text().replace("paths:\n", f"paths:\n  engines_dir: {engines}\n", 1))
    state = tmp_path / "state"
    kept = state / "calibration" / "yolov3-tiny"
    daemon = RunningDaemon(tmp_path, config, REPO)
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: "calibration frames: all 2 of yolov3-tiny kept" in daemon.log_path.read_text(), 120,
                    "two calibration frames")
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        broker.stop()
    log = daemon.log_path.read_text()
    assert "this start serves the engine built on the profile's shipped calibration frames" in log
    assert "they are used once the profile's precision is int8" in log  # the served engine here is fp32

    files = sorted(kept.iterdir())
    assert [f.name for f in files] == ["line1-0000.jpg", "line1-0001.jpg"]
    images = [cv2.imread(str(f)) for f in files]
    assert all(image is not None and image.shape == (480, 640, 3) for image in images)
    assert not np.array_equal(images[0], images[1])
    # Each kept frame is one of the camera's scenes (resized to 640x480, JPEG): closer to it than to the others.
    scenes = [cv2.resize(cv2.imread(str(DARKNET_IMAGES / n)), (640, 480)).astype(np.float32)
              for n in ("dog.jpg", "eagle.jpg", "giraffe.jpg")]
    for image in images:
        errors = sorted(float(np.abs(image.astype(np.float32) - scene).mean()) for scene in scenes)
        assert errors[0] < 10 and errors[1] > 30, errors

    # The next int8 build: the camera frames join the shipped set, and the fingerprint changes with them.
    profile = load_profile(engines / "yolov3-tiny.yaml")
    int8 = profile.model_copy(update={"onnxruntime": profile.onnxruntime.model_copy(update={"precision": "int8"})})
    models = REPO / ".models"
    names = [f.name for f in read_frames(int8, "calibration", models, state)]
    shipped = [f.name for f in read_frames(int8, "calibration", models)]
    assert names[len(shipped):] == ["line1-0000.jpg", "line1-0001.jpg"] and names[:len(shipped)] == shipped
    onnx = int8.onnx_path(models)
    with_frames = EngineManager(state, models, OnnxRuntimeBuilder(), device=DeviceProbe(tmp_path / "dev"))
    without = EngineManager(tmp_path / "fresh", models, OnnxRuntimeBuilder(), device=DeviceProbe(tmp_path / "dev"))
    after, before = with_frames.fingerprint(int8, onnx), without.fingerprint(int8, onnx)
    assert set(after.diff(before.fields)) == {"calibration_sha256"}
