"""The darknet → ONNX converter against OpenCV's own darknet loader, and its errors."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from appliance.detector.source.check import compare_with_opencv
from appliance.detector.source.convert import darknet_to_onnx
from appliance.detector.source.darknet import DarknetFormatError, parse_cfg
from appliance.detector.source.fetch import MAX_HEAD_DIFF


def test_raw_heads_match_opencv_on_every_test_image(detector_dir: Path, images: dict, tmp_path: Path) -> None:
    import onnx

    cfg, weights = detector_dir / "darknet" / "yolov3-tiny.cfg", detector_dir / "darknet" / "yolov3-tiny.weights"
    onnx.save(darknet_to_onnx(cfg, weights), str(tmp_path / "fresh.onnx"))  # this code, not setup's output
    diff = compare_with_opencv(cfg, weights, tmp_path / "fresh.onnx", list(images.values()))
    print(f"max abs diff vs OpenCV darknet over {len(images)} images: boxes={diff.boxes:.2e} "
          f"objectness={diff.objectness:.2e} class_scores={diff.class_scores:.2e}")
    assert diff.rows == 2535 * len(images)
    assert diff.worst <= MAX_HEAD_DIFF


def test_batch_dimension_is_dynamic_and_rows_are_independent(detector_dir: Path, images: dict) -> None:
    sess = ort.InferenceSession(str(detector_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].shape[0] == "batch"
    blobs = [cv2.dnn.blobFromImage(images[n], 1 / 255.0, (416, 416), swapRB=True) for n in ("dog", "kite", "eagle")]
    batched = sess.run(None, {"images": np.concatenate(blobs)})[0]
    assert batched.shape == (3, 2535, 85)
    for i, blob in enumerate(blobs):
        single = sess.run(None, {"images": blob})[0][0]
        np.testing.assert_allclose(batched[i], single, atol=1e-4)


def test_labels_written_beside_the_model(detector_dir: Path) -> None:
    names = (detector_dir / "labels.txt").read_text().split("\n")
    assert names[0] == "person" and names[16] == "dog" and len([n for n in names if n]) == 80


def _cfg(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "net.cfg"
    path.write_text("[net]\nwidth=32\nheight=32\nchannels=3\n" + body)
    return path


def test_unsupported_layer_is_named(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "[dropout]\nprobability=.5\n")
    (tmp_path / "w").write_bytes(np.array([0, 2, 0, 0, 0], dtype=np.int32).tobytes())
    with pytest.raises(DarknetFormatError, match=r"layer 0: \[dropout\] is not supported"):
        darknet_to_onnx(cfg, tmp_path / "w")


def test_weights_shorter_than_cfg_needs(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n")
    (tmp_path / "w").write_bytes(np.array([0, 2, 0, 0, 0], dtype=np.int32).tobytes() + b"\0" * 16)
    with pytest.raises(DarknetFormatError, match="weights end after 4 values"):
        darknet_to_onnx(cfg, tmp_path / "w")


def test_weights_longer_than_cfg_needs(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "[convolutional]\nfilters=1\nsize=1\nactivation=linear\n")
    values = np.zeros(1 + 3 + 5, dtype=np.float32)  # bias, 3 weights, 5 extra
    (tmp_path / "w").write_bytes(np.array([0, 2, 0, 0, 0], dtype=np.int32).tobytes() + values.tobytes())
    with pytest.raises(DarknetFormatError, match="5 values left over"):
        darknet_to_onnx(cfg, tmp_path / "w")


def test_cfg_without_net_section(tmp_path: Path) -> None:
    path = tmp_path / "bad.cfg"
    path.write_text("[convolutional]\nfilters=1\n")
    with pytest.raises(DarknetFormatError, match="first section must be"):
        parse_cfg(path)


def test_cfg_garbage_line_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.cfg"
    path.write_text("[net]\nwidth=32\nthis is not an option\n")
    with pytest.raises(DarknetFormatError, match=r"bad.cfg:3: expected 'key=value'"):
        parse_cfg(path)
