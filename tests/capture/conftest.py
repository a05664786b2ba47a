"""Fixtures for the capture tests: small real videos made with ffmpeg, folders of the real darknet test images
and camera configs (the private /dev/shm root, ``shm_root``, is shared: tests/conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pytest
from support.rtsp import make_test_video

from appliance.capture.config import CameraConfig

DARKNET = Path("/usr/share/darknet/data")


@pytest.fixture(scope="session")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 s of 320x240 H.264 at 15 fps (60 frames)."""
    return make_test_video(tmp_path_factory.mktemp("video") / "testsrc.mp4")


@pytest.fixture(scope="session")
def truncated_video(video: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test video cut in the middle: its index still promises 60 frames."""
    data = video.read_bytes()
    path = tmp_path_factory.mktemp("trunc") / "truncated.mp4"
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.fixture(scope="session")
def images_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("images")
    for name in ("dog.jpg", "horses.jpg", "person.jpg"):
        shutil.copy(DARKNET / name, folder / name)
    return folder


@pytest.fixture
def camera() -> Callable[..., CameraConfig]:
    """Build a CameraConfig from a source dict plus overrides (small frames, quick backoff for tests)."""

    def build(source: dict, **overrides) -> CameraConfig:
        data = {
            "id": "cam0",
            "source": source,
            "width": 320,
            "height": 240,
            "stall_timeout_s": 3.0,
            "backoff": {"initial_s": 0.2, "max_s": 1.0},
        }
        data.update(overrides)
        return CameraConfig.model_validate(data)

    return build
