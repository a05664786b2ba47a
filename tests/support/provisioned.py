"""What scripts/setup.sh provides that integration tests need: the converted detector, the Triton
distribution and Debian's darknet test images. A test that needs one FAILS when it is missing, naming the fix: a
skip would let a bare ``pytest`` pass with no end-to-end coverage. (GPU-only tests still skip without a GPU: see
tests/conftest.py.)"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from appliance.triton.locate import TritonDistribution, TritonNotFound, locate

REPO = Path(__file__).resolve().parents[2]
DETECTOR_ONNX = REPO / ".models" / "yolov3-tiny" / "model.onnx"
DARKNET_IMAGES = Path("/usr/share/darknet/data")
# The images Debian's `darknet` package ships (scripts/setup.sh installs it); the tests read all of them.
DARKNET_IMAGE_NAMES = ("dog", "eagle", "giraffe", "horses", "kite", "person", "scream")
FIX = "run scripts/setup.sh"


def require_detector(path: Path = DETECTOR_ONNX) -> Path:
    """``path`` if the detector model is there; otherwise fail the calling test."""
    if not path.is_file():
        pytest.fail(f"the detector model {path} is missing: {FIX} (it fetches and converts .models/yolov3-tiny)",
                    pytrace=False)
    return path


def require_triton(home: Path | None = None) -> TritonDistribution:
    """The Triton distribution the tests will use (``home``, else the usual search); otherwise fail the test."""
    try:
        return locate(home)
    except TritonNotFound as err:
        pytest.fail(f"{err}\nFor the tests: {FIX}", pytrace=False)


def require_darknet_images(folder: Path = DARKNET_IMAGES, names: Iterable[str] = DARKNET_IMAGE_NAMES) -> Path:
    """``folder`` if every ``<name>.jpg`` is there; otherwise fail the calling test, naming what is missing."""
    missing = [f"{name}.jpg" for name in names if not (folder / f"{name}.jpg").is_file()]
    if missing:
        pytest.fail(f"Debian's darknet test images {', '.join(missing)} are missing from {folder}: {FIX} "
                    f"(it installs the 'darknet' apt package)", pytrace=False)
    return folder
