"""What scripts/setup.sh provides that integration tests need: the converted detector and the Triton
distribution. A test that needs one FAILS when it is missing, naming the fix: a skip would let a bare
``pytest`` pass with no end-to-end coverage. (GPU-only tests still skip without a GPU: see tests/conftest.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.triton.locate import TritonDistribution, TritonNotFound, locate

REPO = Path(__file__).resolve().parents[2]
DETECTOR_ONNX = REPO / ".models" / "yolov3-tiny" / "model.onnx"
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
