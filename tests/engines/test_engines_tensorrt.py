"""The TensorRT builder. Without a GPU: builder selection and clear errors when the toolchain is absent.
With a GPU and tensorrt (marked `gpu`): real builds of small models and the detector, verified against ONNX
Runtime, the timing cache reused, DLA and shape errors named."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from engines_helpers import REPO, EngineEnv, write_profile

from appliance.detector.engines.builders import BuilderUnavailable, gpu_visible, select_builder
from appliance.detector.engines.manager import EngineBuildError

HAS_TRT = importlib.util.find_spec("tensorrt") is not None
# `gpu` alone skips only where no GPU node exists (tests/conftest.py); a GPU host without the tensorrt package
# (a PC with the NVIDIA driver only) must skip these too, not fail with BuilderUnavailable.
needs_tensorrt = pytest.mark.skipif(not HAS_TRT,
                                    reason="needs the tensorrt Python package (JetPack: python3-libnvinfer)")


def test_auto_picks_onnxruntime_without_a_gpu(tmp_path: Path) -> None:
    assert not gpu_visible(tmp_path)
    assert select_builder("auto", tmp_path).name == "onnxruntime"


def test_gpu_nodes_are_recognised(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvhost-ctrl-gpu").touch()  # a Jetson iGPU node
    assert gpu_visible(tmp_path)
    expected = "tensorrt" if HAS_TRT else "onnxruntime"
    assert select_builder("auto", tmp_path).name == expected


@pytest.mark.skipif(HAS_TRT, reason="tensorrt is installed here")
def test_tensorrt_requested_without_tensorrt_is_a_clear_error() -> None:
    with pytest.raises(BuilderUnavailable, match="needs the tensorrt Python package"):
        select_builder("tensorrt")


def test_unknown_builder_is_named() -> None:
    with pytest.raises(BuilderUnavailable, match="unknown engine builder 'openvino'"):
        select_builder("openvino")  # type: ignore[arg-type]


@pytest.mark.skipif(HAS_TRT, reason="tensorrt is installed here")
def test_trt_module_imports_without_tensorrt() -> None:
    from appliance.detector.engines.builders.trt import TensorRTBuilder

    builder = TensorRTBuilder()
    assert builder.engine_file == "model.plan" and builder.triton_kind == "tensorrt_plan"
    with pytest.raises(BuilderUnavailable, match="python3-libnvinfer"):
        builder.version()


def test_cuda_absent_is_builder_unavailable() -> None:
    from appliance.detector.engines.builders.cuda import _load, gpu_identity

    if _load(["libcuda.so.1", "libcuda.so"]) is not None:
        pytest.skip("a CUDA driver is present")
    with pytest.raises(BuilderUnavailable, match="no NVIDIA GPU"):
        gpu_identity()


# ---- real TensorRT (GPU hosts, Jetson) -------------------------------------------------------------------------
def _trt_manager(env: EngineEnv):  # type: ignore[no-untyped-def]
    from appliance.detector.engines.builders.trt import TensorRTBuilder

    return env.manager(builder=TensorRTBuilder(), device_root=Path("/"))


@pytest.mark.gpu
@needs_tensorrt
@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tensorrt_builds_and_verifies(env: EngineEnv, precision: str) -> None:
    write_profile(env.engines, tensorrt={"precision": precision, "workspace_mib": 256})
    built = _trt_manager(env).ensure(env.profile())
    assert built.triton_kind == "tensorrt_plan" and built.engine_path.name == "model.plan"
    assert built.verification.startswith("passed"), built.verification
    manifest = json.loads(built.manifest_path.read_text())
    assert manifest["fingerprint"]["gpu_cc"] and manifest["fingerprint"]["gpu_name"]
    assert manifest["build"]["shapes"]["images"] == {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}
    assert manifest["io"]["inputs"][0]["dims"] == [None, 3, 8, 8]
    assert _trt_manager(env).ensure(env.profile()).cache_hit


@pytest.mark.gpu
@needs_tensorrt
@pytest.mark.slow
def test_tensorrt_timing_cache_is_reused(env: EngineEnv) -> None:
    write_profile(env.engines, tensorrt={"precision": "fp32", "workspace_mib": 256})
    first = _trt_manager(env).ensure(env.profile())
    rebuilt = _trt_manager(env).ensure(env.profile(), force=True)
    build = json.loads(rebuilt.manifest_path.read_text())["build"]
    assert Path(build["timing_cache"]).is_file() and build["timing_cache_reused"] is True
    assert rebuilt.key == first.key


@pytest.mark.gpu
@needs_tensorrt
def test_tensorrt_dla_core_beyond_the_device_is_named(env: EngineEnv) -> None:
    write_profile(env.engines, tensorrt={"precision": "fp16", "dla_core": 7})
    with pytest.raises(EngineBuildError, match=r"tensorrt\.dla_core=7 but this device has \d+ DLA core"):
        _trt_manager(env).ensure(env.profile())


@pytest.mark.gpu
@needs_tensorrt
def test_tensorrt_rejects_a_truncated_onnx(env: EngineEnv) -> None:
    path = env.models / "tiny.onnx"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(EngineBuildError, match="parse failed"):
        _trt_manager(env).ensure(env.profile())


@pytest.mark.gpu
@needs_tensorrt
@pytest.mark.slow
@pytest.mark.usefixtures("detector_onnx")  # fails, not skips, without the detector (tests/conftest.py)
def test_tensorrt_builds_the_detector(tmp_path: Path) -> None:
    from appliance.detector.engines import ensure_engines

    [engine] = ensure_engines(REPO / "engines", state_dir=tmp_path, models_root=REPO / ".models",
                              builder="tensorrt", models=["yolov3-tiny"])
    assert engine.verification.startswith("passed"), engine.verification
    # pre/post built in: EfficientNMS_TRT, checked against ONNX Runtime on the NonMaxSuppression variant
    assert engine.in_graph
    assert engine.inputs == [{"name": "FRAME", "dtype": "uint8", "dims": [None, 416, 416, 3]}]
    assert [(o["name"], o["dtype"]) for o in engine.outputs] == [
        ("BOXES", "float32"), ("SCORES", "float32"), ("CLASSES", "int32"), ("COUNT", "int32")]


@pytest.mark.gpu
@needs_tensorrt
@pytest.mark.slow
@pytest.mark.usefixtures("detector_onnx", "darknet_images")
def test_tensorrt_builds_the_int8_detector_from_the_quantized_model(tmp_path: Path) -> None:
    """The shipped profile at tensorrt.precision int8: TensorRT builds the one quantized model (explicit Q/DQ, no
    calibrator), wrapped with EfficientNMS, and the engine passes verification and the detection gate."""
    import yaml

    from appliance.detector.engines import ensure_engines

    data = yaml.safe_load((REPO / "engines" / "yolov3-tiny.yaml").read_text())
    data["tensorrt"]["precision"] = "int8"
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "yolov3-tiny.yaml").write_text(yaml.safe_dump(data))
    [engine] = ensure_engines(tmp_path / "engines", state_dir=tmp_path / "state", models_root=REPO / ".models",
                              builder="tensorrt", models=["yolov3-tiny"])
    assert engine.precision == "int8" and engine.refused is None, engine.refused
    assert engine.verification.startswith("detection gate passed"), engine.verification
    assert engine.in_graph and engine.inputs[0]["name"] == "FRAME"
    build = json.loads(engine.manifest_path.read_text())["build"]
    assert build["in_graph"]["when"] == "after" and build["in_graph"]["nms"] == "trt"
    assert build["quantized"]["tensorrt_rules"] == "passed" and build["quantized"]["int8_convs"] == 10
    major = int(build["tensorrt_version"].split(".")[0])
    assert build["network"] == ("strongly typed" if major >= 10 else "weakly typed")
    assert not list((tmp_path / "state" / "engines" / "timing").glob("*.calib"))  # no calibration table
