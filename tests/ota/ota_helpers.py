"""Helpers for the OTA tests (their fixtures, built from these, live in conftest.py): signing keys, bundle source
directories (the real YOLOv3-tiny detector, or a tiny real ONNX model for fast and kill tests). Imported as
``ota_helpers`` (``from conftest import`` picks whichever test directory's conftest was imported first)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from support.provisioned import DETECTOR_ONNX  # noqa: F401 (the OTA tests import it from here)

from appliance.ota.signing import TrustedKeys, generate_keypair

REPO = Path(__file__).resolve().parents[2]
IMAGES = Path("/usr/share/darknet/data")


def make_tiny_detector(path: Path, *, classes: int = 2, rows: int = 6, size: int = 32, seed: int = 0,
                       broken: bool = False) -> Path:
    """images[N,3,size,size] -> Flatten -> MatMul -> Sigmoid -> [N, rows, 5+classes]: a real (if silly) head.
    ``broken``: the weight's shape does not fit the flattened input; the ONNX checker accepts it, ONNX Runtime
    does not."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(seed)
    width = rows * (5 + classes)
    inner = 3 * size * size + (7 if broken else 0)
    w = numpy_helper.from_array(rng.standard_normal((inner, width)).astype(np.float32) * 0.01, "w")
    shape = numpy_helper.from_array(np.array([-1, rows, 5 + classes], dtype=np.int64), "shape")
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", rows, 5 + classes])
    nodes = [helper.make_node("Flatten", ["images"], ["flat"], axis=1),
             helper.make_node("MatMul", ["flat", "w"], ["mm"]),
             helper.make_node("Sigmoid", ["mm"], ["sig"]),
             helper.make_node("Reshape", ["sig", "shape"], ["output"])]
    model = helper.make_model(helper.make_graph(nodes, "tiny", [x], [y], [w, shape]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    save(model, str(path))
    return path


def tiny_model_profile(size: int = 32) -> dict[str, Any]:
    return {"name": "tiny", "input": {"width": size, "height": size, "stride": 32},
            "head": {"layout": "rows_with_objectness"}, "classes": ["a", "b"], "thresholds": {"score": 0.5}}


def tiny_engine_profile() -> dict[str, Any]:
    return {"model": "tiny", "onnx": "ignored.onnx", "batch": {"min": 1, "opt": 1, "max": 2},
            "verify": {"samples": 1}, "keep": 1}


def yolo_model_profile() -> dict[str, Any]:
    return yaml.safe_load((REPO / "repository" / "profiles" / "yolov3-tiny.yaml").read_text())


def yolo_engine_profile() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "engines" / "yolov3-tiny.yaml").read_text())
    data["verify"]["samples"] = 1  # one golden batch keeps the on-device build short in tests
    return data


def write_source(src: Path, *, version: str, onnx: Path, model_profile: dict[str, Any],
                 engine_profile: dict[str, Any], model: str | None = None, golden: list[dict[str, Any]] | None = None,
                 golden_files: dict[str, Path] | None = None, **extra: Any) -> Path:
    """A bundle source directory: bundle.yaml, the ONNX (symlinked) and golden images (symlinked)."""
    src.mkdir(parents=True, exist_ok=True)
    os.symlink(onnx, src / "model.onnx")
    for name, path in (golden_files or {}).items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(path, src / name)
    spec = {"model": model or engine_profile["model"], "version": version, "min_appliance_version": "0.1.0",
            "model_profile": copy.deepcopy(model_profile), "engine_profile": copy.deepcopy(engine_profile),
            "golden": golden or [], **extra}
    (src / "bundle.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return src


class Traffic:
    """A fake monotonic clock whose sleep() also sends two requests through the router (failing or not, with
    ``latency_s`` and ``detections`` each): the manager's health watch sees real router statistics without
    waiting in real time. ``switcher`` is an OfflineSwitcher on this clock."""

    def __init__(self) -> None:
        from appliance.ota.offline import OfflineSwitcher

        self.t = 1000.0
        self.fail = False
        self.latency_s = 0.01
        self.detections = 1
        self.switcher = OfflineSwitcher(clock=self.monotonic)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        for _ in range(2):
            route = self.switcher.router.acquire()
            self.switcher.router.release(route, not self.fail, self.latency_s, self.detections)
        self.t += seconds


class Keys:
    def __init__(self, root: Path) -> None:
        self.private, self.public = root / "ota.key", root / "ota.pub"
        self.other_private, self.other_public = root / "other.key", root / "other.pub"
        self.id = generate_keypair(self.private, self.public)
        self.other_id = generate_keypair(self.other_private, self.other_public)

    def trusted(self) -> TrustedKeys:
        return TrustedKeys.from_paths([self.public])
