"""First-boot calibration frames from the cameras: kept spread over cameras and time, stopped at the count,
resumed after a restart, never a repeated frame; the calibration reader takes them through the inference
preprocess. Real images (the darknet set and sample video frames), real JPEG files."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from appliance.detector.buildprofile import EngineProfile, load_profile
from appliance.detector.calibration.device import CalibrationCollector
from appliance.detector.calibration.frames import frame_set, model_profile_for

REPO = Path(__file__).resolve().parents[2]
DARKNET = Path("/usr/share/darknet/data")
NAMES = ("dog", "eagle", "giraffe", "horses", "kite", "person", "scream")


@pytest.fixture(scope="module")
def images() -> list[np.ndarray]:
    out = [cv2.imread(str(DARKNET / f"{n}.jpg")) for n in NAMES]
    assert all(i is not None for i in out)
    return out


def _kept(state: Path) -> list[str]:
    return sorted(p.name for p in (state / "calibration" / "yolov3-tiny").glob("*"))


def test_frames_are_kept_spread_in_time_and_stop_at_the_count(tmp_path: Path, images: list[np.ndarray]) -> None:
    c = CalibrationCollector(tmp_path, "yolov3-tiny", count=3, spread_s=5.0)
    kept = [t for t in range(14) if c.offer("cam0", images[t % len(images)], float(t))]
    assert kept == [0, 5, 10] and c.done and c.kept == 3  # every 5 s, then nothing more
    assert _kept(tmp_path) == ["cam0-0000.jpg", "cam0-0001.jpg", "cam0-0002.jpg"]  # no temp files left
    decoded = cv2.imread(str(tmp_path / "calibration" / "yolov3-tiny" / "cam0-0001.jpg"))
    assert decoded.shape == images[5].shape
    assert np.abs(decoded.astype(int) - images[5].astype(int)).mean() < 3  # the frame offered at t=5, as JPEG


def test_cameras_share_the_count(tmp_path: Path, images: list[np.ndarray]) -> None:
    c = CalibrationCollector(tmp_path, "yolov3-tiny", count=4, spread_s=0.0, cameras=2)
    first = [c.offer("front door", images[i], float(i)) for i in range(4)]
    assert first == [True, True, False, False]  # its share of 4 over 2 cameras
    assert [c.offer("yard", images[4 + i], float(i)) for i in range(3)] == [True, True, False]
    assert c.done and _kept(tmp_path) == ["front_door-0000.jpg", "front_door-0001.jpg", "yard-0002.jpg",
                                          "yard-0003.jpg"]


def test_a_repeated_frame_is_not_kept(tmp_path: Path, images: list[np.ndarray]) -> None:
    c = CalibrationCollector(tmp_path, "yolov3-tiny", count=3, spread_s=0.0)
    assert c.offer("cam0", images[0], 0.0)
    assert not c.offer("cam0", images[0].copy(), 10.0)  # a frozen camera sends the same image again
    assert not c.offer("cam1", images[0].copy(), 10.0)
    assert c.offer("cam0", images[1], 20.0) and c.kept == 2


def test_a_restart_resumes_and_never_overwrites(tmp_path: Path, images: list[np.ndarray]) -> None:
    c = CalibrationCollector(tmp_path, "yolov3-tiny", count=3, spread_s=0.0)
    assert c.offer("cam0", images[0], 0.0) and c.offer("cam0", images[1], 1.0)
    (tmp_path / "calibration" / "yolov3-tiny" / "cam0-0000.jpg").unlink()  # removed by hand
    again = CalibrationCollector(tmp_path, "yolov3-tiny", count=3, spread_s=0.0)
    assert again.kept == 1 and not again.done
    assert again.offer("cam0", images[2], 2.0) and again.offer("cam0", images[3], 3.0)
    assert again.done and not again.offer("cam0", images[4], 4.0)
    assert _kept(tmp_path) == ["cam0-0001.jpg", "cam0-0002.jpg", "cam0-0003.jpg"]
    one = cv2.imread(str(tmp_path / "calibration" / "yolov3-tiny" / "cam0-0001.jpg"))
    assert np.abs(one.astype(int) - images[1].astype(int)).mean() < 3  # the first run's frame, not overwritten
    full = CalibrationCollector(tmp_path, "yolov3-tiny", count=3, spread_s=0.0)
    assert full.done and not full.offer("cam1", images[5], 0.0)


@pytest.mark.parametrize("frame", [np.zeros((48, 64), np.uint8), np.zeros((48, 64, 4), np.uint8),
                                   np.zeros((48, 64, 3), np.float32)], ids=["gray", "bgra", "float"])
def test_a_frame_that_is_not_bgr_uint8_is_an_error(tmp_path: Path, frame: np.ndarray) -> None:
    c = CalibrationCollector(tmp_path, "yolov3-tiny", count=3, spread_s=0.0)
    with pytest.raises(ValueError, match="H x W x 3 uint8 BGR"):
        c.offer("cam0", frame, 0.0)
    assert c.kept == 0 and _kept(tmp_path) == []


@pytest.mark.parametrize("kw,match", [({"count": 0}, "count"), ({"spread_s": -1.0}, "spread_s"),
                                      ({"cameras": 0}, "cameras")])
def test_bad_settings_are_errors(tmp_path: Path, kw: dict[str, float], match: str) -> None:
    args: dict = {"count": 3, "spread_s": 1.0, **kw}
    with pytest.raises(ValueError, match=match):
        CalibrationCollector(tmp_path, "yolov3-tiny", **args)


def test_the_calibration_reader_takes_the_kept_frames_through_the_preprocess(tmp_path: Path,
                                                                          images: list[np.ndarray]) -> None:
    c = CalibrationCollector(tmp_path / "state", "yolov3-tiny", count=4, spread_s=0.0, cameras=2)
    for i, image in enumerate(images[:4]):
        assert c.offer(f"cam{i % 2}", image, float(i))
    shipped = load_profile(REPO / "engines" / "yolov3-tiny.yaml")
    data = shipped.model_dump(mode="json")
    data["calibration"].update(sources=[{"path": str(DARKNET / "scream.jpg")}], device_frames=4)
    profile = EngineProfile.model_validate(data)
    frames = frame_set(profile, "calibration", tmp_path / "models", model_profile_for(profile), tmp_path / "state")
    assert len(frames.tensors) == 5  # the sample image and the four camera frames
    assert sorted(f.name for f in frames.frames)[:4] == ["cam0-0000.jpg", "cam0-0002.jpg", "cam1-0001.jpg",
                                                         "cam1-0003.jpg"]
    assert frames.tensors[1].shape == (3, 416, 416)
