"""Missing setup fails the tests that need it, naming the fix (tests/support/provisioned.py, used through the
``detector_onnx``, ``triton_distribution`` and ``darknet_images`` fixtures): a skip would leave a bare pytest
green with no end-to-end coverage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.provisioned import DARKNET_IMAGE_NAMES, require_darknet_images, require_detector, require_triton

from appliance.capture.sample import SAMPLE_IMAGES
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


def test_missing_darknet_images_fail_the_test_and_name_each_one_and_the_fix(tmp_path: Path,
                                                                            darknet_images: Path) -> None:
    for name in DARKNET_IMAGE_NAMES:
        if name not in ("kite", "scream"):
            shutil.copy(darknet_images / f"{name}.jpg", tmp_path)
    with pytest.raises(pytest.fail.Exception, match="run scripts/setup.sh") as info:  # a failure, not a skip
        require_darknet_images(tmp_path)
    message = str(info.value)
    assert "kite.jpg, scream.jpg" in message and "dog.jpg" not in message and str(tmp_path) in message


def test_an_empty_image_folder_fails(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="dog.jpg"):
        require_darknet_images(tmp_path / "nothing-here")


def test_the_checkouts_darknet_images_cover_the_sample_video(darknet_images: Path) -> None:
    assert set(SAMPLE_IMAGES) <= set(DARKNET_IMAGE_NAMES)  # the fixture vouches for what the sample video reads
    assert require_darknet_images(darknet_images) == darknet_images
