"""The build's graph step (appliance.detector.engines.ingraph): which graph each builder and precision turns into an
engine, the wrap spec in the cache key, the real detector built wrapped on ONNX Runtime, an unwrappable model built as
it is with the reason recorded, and the TensorRT variant (EfficientNMS) handed to the TensorRT builder, which runs
here against the recording stand-in (tests/engines/trt_standin.py); real TensorRT builds are `gpu` tests."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import onnx
import pytest
from engines_helpers import REPO, EngineEnv, write_profile

from appliance.detector.buildprofile import load_profile
from appliance.detector.engines.builders.trt import TensorRTBuilder
from appliance.detector.engines.ingraph import plan_wrap, prepare
from appliance.detector.engines.manager import EngineManager
from appliance.detector.engines.onnxinfo import inspect_onnx
from appliance.detector.profile import load_profile as load_model_profile
from appliance.detector.repository.wrap import FRAME_INPUT
from appliance.durable import sha256_file
from tests.engines.trt_standin import StandInGpu, make_tensorrt

SHIPPED = REPO / "engines" / "yolov3-tiny.yaml"


class _StandInGpuBuilder(TensorRTBuilder):
    """The real builder; only the GPU identity (read from libcuda through ctypes) is given, not probed."""

    def device_fields(self) -> dict[str, str]:
        return {"gpu_name": "Orin (stand-in)", "gpu_cc": "8.7", "cuda_driver": "12.2"}
PROCESSING = REPO / "repository" / "profiles" / "yolov3-tiny.yaml"


@pytest.fixture
def shipped():
    return load_profile(SHIPPED)


@pytest.fixture
def processing():
    return load_model_profile(PROCESSING)


@pytest.mark.parametrize("builder, precision, when, nms", [
    ("tensorrt", "fp16", "before", "trt"),
    ("tensorrt", "fp32", "before", "trt"),
    ("tensorrt", "int8", "after", "trt"),  # the quantized model wrapped, then built
    ("onnxruntime", "fp32", "before", "onnx"),
    ("onnxruntime", "int8", "after", "onnx"),
])
def test_when_each_builder_wraps(shipped, processing, builder, precision, when, nms) -> None:
    plan = plan_wrap(shipped, builder, precision, processing)
    assert plan.when == when and plan.spec is not None and plan.spec.nms == nms
    assert plan.fingerprint_fields() == {"in_graph_sha256": plan.spec.digest()}


def test_switched_off_or_without_a_model_profile_nothing_is_wrapped(shipped, env: EngineEnv) -> None:
    off = plan_wrap(shipped.model_copy(update={"in_graph": False}), "onnxruntime", "fp32", None)
    assert off.when == "none" and "in_graph is off" in off.reason
    tiny = plan_wrap(env.profile(), "onnxruntime", "fp32", None)  # no repository/profiles/tiny.yaml
    assert tiny.when == "none" and "no model profile" in tiny.reason and "tiny.yaml" in tiny.reason


def test_a_profile_with_golden_tensors_for_the_network_input_is_not_wrapped(shipped) -> None:
    with_golden = shipped.model_copy(update={"verify": shipped.verify.model_copy(update={"golden": "g/engine.npz"})})
    plan = plan_wrap(with_golden, "onnxruntime", "fp32", None)
    assert plan.when == "none" and plan.spec is None and "verify.golden (g/engine.npz)" in plan.reason


@pytest.mark.usefixtures("detector_onnx")
def test_tensorrt_builds_the_efficient_nms_variant_and_verifies_against_the_onnx_one(shipped, processing,
                                                                                    tmp_path: Path) -> None:
    sources = prepare(REPO / ".models" / "yolov3-tiny" / "model.onnx",
                      plan_wrap(shipped, "tensorrt", "fp16", processing), tmp_path, "yolov3-tiny")
    build, reference = onnx.load(str(sources.build)), onnx.load(str(sources.reference))
    assert [n.op_type for n in build.graph.node].count("EfficientNMS_TRT") == 1
    assert "NonMaxSuppression" not in [n.op_type for n in build.graph.node]
    assert [n.op_type for n in reference.graph.node].count("NonMaxSuppression") == 1
    # the same I/O: verification compares the engine with ONNX Runtime on the reference
    build_info, ref_info = inspect_onnx(sources.build), inspect_onnx(sources.reference)
    assert build_info.inputs == ref_info.inputs
    assert [(t.name, t.dtype) for t in build_info.outputs] == [(t.name, t.dtype) for t in ref_info.outputs]
    assert sources.after is None
    assert sources.details == {"applied": True, "when": "before", "nms": "trt",
                               "spec_sha256": plan_wrap(shipped, "tensorrt", "fp16", processing).spec.digest(),
                               "graph_sha256": sha256_file(sources.build)}


@pytest.mark.usefixtures("detector_onnx")
def test_the_tensorrt_builder_gets_the_uint8_frame_input(shipped, processing, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = StandInGpu()
    monkeypatch.setitem(sys.modules, "tensorrt", make_tensorrt(gpu))
    sources = prepare(REPO / ".models" / "yolov3-tiny" / "model.onnx",
                      plan_wrap(shipped, "tensorrt", "fp16", processing), tmp_path, "yolov3-tiny")
    out = tmp_path / "model.plan"
    details = _StandInGpuBuilder().build(inspect_onnx(sources.build), shipped, out, lambda f, m: None, tmp_path)
    assert [i.name for i in gpu.network.inputs] == [FRAME_INPUT]
    assert details["shapes"][FRAME_INPUT] == {"min": [1, 416, 416, 3], "opt": [1, 416, 416, 3], "max": [4, 416, 416, 3]}
    assert out.read_bytes() == gpu.plan


@pytest.mark.slow
@pytest.mark.usefixtures("detector_onnx")
def test_the_detector_builds_wrapped_and_the_spec_is_in_the_key(tmp_path: Path, shipped, processing,
                                                                env: EngineEnv) -> None:
    models = tmp_path / "models"
    (models / "yolov3-tiny").mkdir(parents=True)
    (models / "yolov3-tiny" / "model.onnx").symlink_to(REPO / ".models" / "yolov3-tiny" / "model.onnx")
    env = dataclasses.replace(env, models=models)
    manager: EngineManager = env.manager()
    onnx_path = models / "yolov3-tiny" / "model.onnx"
    key = manager.fingerprint(shipped, onnx_path, processing)
    assert key.fields["in_graph_sha256"] == plan_wrap(shipped, "onnxruntime", "fp32", processing).spec.digest()
    stricter = processing.model_copy(update={"thresholds": processing.thresholds.model_copy(update={"score": 0.4})})
    assert manager.fingerprint(shipped, onnx_path, stricter).key != key.key  # baked-in thresholds: a new engine
    off = manager.fingerprint(shipped.model_copy(update={"in_graph": False}), onnx_path, processing)
    assert "in_graph_sha256" not in off.fields and off.key != key.key

    engine = manager.ensure(shipped, model_profile=processing)
    assert engine.in_graph and engine.key == key.key and engine.verification.startswith("passed")
    assert [t["name"] for t in engine.inputs] == [FRAME_INPUT]
    build = json.loads(engine.manifest_path.read_text())["build"]["in_graph"]
    assert build["applied"] and build["when"] == "before" and build["nms"] == "onnx"


@pytest.mark.slow
@pytest.mark.usefixtures("detector_onnx")
def test_a_model_that_cannot_be_wrapped_is_built_as_it_is_and_says_why(tmp_path: Path, shipped, processing,
                                                                       env: EngineEnv,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    models = tmp_path / "models"
    (models / "yolov3-tiny").mkdir(parents=True)
    (models / "yolov3-tiny" / "model.onnx").symlink_to(REPO / ".models" / "yolov3-tiny" / "model.onnx")
    env = dataclasses.replace(env, models=models)
    wrong = processing.model_copy(update={"classes": ["a", "b", "c"]})  # the 80-class head does not fit
    with caplog.at_level(logging.INFO, logger="appliance.detector.engines"):
        engine = env.manager().ensure(shipped, model_profile=wrong)
    assert not engine.in_graph and engine.verification.startswith("passed")
    assert [t["name"] for t in engine.inputs] == ["images"]
    reason = json.loads(engine.manifest_path.read_text())["build"]["in_graph"]
    assert reason["applied"] is False and "with 3 classes has 8" in reason["reason"]
    assert any("cannot be wrapped" in r.getMessage() and "with 3 classes" in r.getMessage() for r in caplog.records)


def test_a_tiny_model_without_a_model_profile_builds_as_before(env: EngineEnv) -> None:
    write_profile(env.engines)
    engine = env.manager().ensure(env.profile())
    assert not engine.in_graph and [t["name"] for t in engine.inputs] == ["images"]
    assert "in_graph_sha256" not in json.loads(engine.manifest_path.read_text())["fingerprint"]
