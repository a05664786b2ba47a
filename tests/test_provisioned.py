"""Missing setup fails the tests that need it, naming the fix (tests/support/provisioned.py, used through the
``detector_onnx`` and ``triton_distribution`` fixtures): a skip would leave a bare pytest green with no end-to-end
coverage."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.provisioned import require_detector, require_triton

from appliance.triton.locate import TritonDistribution


def test_a_missing_detector_fails_the_test_and_names_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "yolov3-tiny" / "model.onnx"
    with pytest.raises(pytest.fail.Exception, match="run scripts/setup.sh") as info:  # a failure, not a skip
        require_detector(missing)
    assert str(missing) in str(info.value)


def test_a_present_detector_is_returned(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"not checked here")
    assert require_detector(model) == model


def test_a_missing_triton_fails_the_test_and_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="run scripts/setup.sh"):  # a failure, not a skip
        require_triton(tmp_path / "no-triton-here")


def test_the_checkouts_detector_and_triton_are_in_place(detector_onnx: Path,
                                                        triton_distribution: TritonDistribution) -> None:
    assert detector_onnx.is_file() and triton_distribution.library.is_file()
