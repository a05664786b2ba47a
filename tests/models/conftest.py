"""Fixtures for the model-repository tests: the real converted detector, its profile, Debian's darknet images,
and the independent OpenCV reference."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGES = Path("/usr/share/darknet/data")
IMAGE_NAMES = ("dog", "person", "horses", "kite", "eagle", "giraffe")


@pytest.fixture(scope="session")
def detector_dir() -> Path:
    """.models/yolov3-tiny, converted by scripts/setup.d/20-detector.sh (converted here if setup was skipped)."""
    from appliance.detector.source.fetch import fetch_and_convert

    dest = REPO / ".models" / "yolov3-tiny"
    fetch_and_convert(dest)
    return dest


@pytest.fixture(scope="session")
def profile_path() -> Path:
    return REPO / "repository" / "profiles" / "yolov3-tiny.yaml"


@pytest.fixture(scope="session")
def profile(profile_path: Path):
    from appliance.detector.profile import load_profile

    return load_profile(profile_path)


@pytest.fixture(scope="session")
def images() -> dict[str, np.ndarray]:
    out = {}
    for name in IMAGE_NAMES:
        img = cv2.imread(str(IMAGES / f"{name}.jpg"))
        assert img is not None, f"{IMAGES}/{name}.jpg missing: apt package 'darknet' (scripts/setup.sh installs it)"
        out[name] = img
    return out


@pytest.fixture(scope="session")
def reference(detector_dir: Path, profile):
    from models_reference import OpenCVReference

    return OpenCVReference(detector_dir / "darknet" / "yolov3-tiny.cfg",
                           detector_dir / "darknet" / "yolov3-tiny.weights",
                           size=profile.input.width, pad=profile.input.pad_value)

