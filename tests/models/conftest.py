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
    from appliance.models.fetch import fetch_and_convert

    dest = REPO / ".models" / "yolov3-tiny"
    fetch_and_convert(dest)
    return dest


@pytest.fixture(scope="session")
def profile_path() -> Path:
    return REPO / "repository" / "profiles" / "yolov3-tiny.yaml"


@pytest.fixture(scope="session")
def profile(profile_path: Path):
    from appliance.models.profile import load_profile

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


def write_v8_adapter(src: Path, dst: Path) -> None:
    """Append a YOLOv8-style adapter to the converted detector: [N, 2535, 85] → [N, 84, 2535] (box rows, then
    obj×cls rows; no objectness row), so the channels_first decode runs on a real network."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    g = model.graph
    old = g.output[0].name
    for node in g.node:  # rename the original output so the adapter's result can take its name
        node.output[:] = [o if o != old else "v3_head" for o in node.output]

    def const(name: str, values: list[int]) -> str:
        g.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    axes = const("v8_axes", [2])
    g.node.extend([
        helper.make_node("Slice", ["v3_head", const("v8_0", [0]), const("v8_4", [4]), axes], ["v8_box"]),
        helper.make_node("Slice", ["v3_head", const("v8_4b", [4]), const("v8_5", [5]), axes], ["v8_obj"]),
        helper.make_node("Slice", ["v3_head", const("v8_5b", [5]), const("v8_end", [1 << 30]), axes], ["v8_cls"]),
        helper.make_node("Mul", ["v8_cls", "v8_obj"], ["v8_scores"]),
        helper.make_node("Concat", ["v8_box", "v8_scores"], ["v8_rows"], axis=2),
        helper.make_node("Transpose", ["v8_rows"], [old], perm=[0, 2, 1]),
    ])
    g.output[0].type.tensor_type.shape.dim[1].dim_param = "channels"
    g.output[0].type.tensor_type.shape.dim[2].dim_param = "boxes"
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
