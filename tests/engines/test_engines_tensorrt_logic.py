"""The TensorRT builder's own logic, in CI: appliance/detector/engines/builders/trt.py runs for real against a recording
stand-in `tensorrt` module (tests/engines/trt_standin.py), put in sys.modules only for these tests, since TensorRT
cannot run without an NVIDIA GPU. Checked: builder flags per precision, the workspace pool, the optimization
profile's shapes, DLA settings and errors, the timing cache's life cycle, parser errors, explicit INT8 (the quantized
model, a strongly typed network on TensorRT 10, no calibrator), progress.
Real builds and their verification run in test_engines_tensorrt.py (marked `gpu`)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from engines_helpers import EngineEnv, make_onnx, write_profile

from appliance.detector.buildprofile import EngineProfile, QuantizationProfile
from appliance.detector.calibration.frames import FrameSet, frame_set, model_profile_for
from appliance.detector.engines.builders.base import BuildError
from appliance.detector.engines.builders.trt import TensorRTBuilder
from appliance.detector.engines.manager import EngineBuildError
from appliance.detector.engines.onnxinfo import inspect_onnx
from appliance.detector.engines.qdqcheck import QdqCheckError, check_quantized
from appliance.detector.engines.quantize import build_int8_model
from tests.engines.trt_standin import BuilderFlag, DeviceType, MemoryPoolType, StandInGpu, make_tensorrt

IDENTITY = {"gpu_name": "Orin (stand-in)", "gpu_cc": "8.7", "cuda_driver": "12.2"}


class _StandInGpuBuilder(TensorRTBuilder):
    """The real builder; only the GPU identity (read from libcuda through ctypes) is given, not probed."""

    def device_fields(self) -> dict[str, str]:
        return dict(IDENTITY)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> StandInGpu:
    device = StandInGpu()
    monkeypatch.setitem(sys.modules, "tensorrt", make_tensorrt(device))
    return device


DARKNET = Path("/usr/share/darknet/data")
TINY_PROCESSING = {"name": "tiny", "classes": ["thing"], "head": {"layout": "rows_with_objectness"},
                   "input": {"width": 8, "height": 8, "stride": 8, "pad_value": 127}}


def _frames(env: EngineEnv, names: tuple[str, ...] = ("dog", "eagle", "giraffe", "horses", "kite", "person")
            ) -> FrameSet:
    """Real darknet images through the inference preprocess, at the tiny model's 8x8 input."""
    (env.root / "processing.yaml").write_text(yaml.safe_dump(TINY_PROCESSING))  # not in engines/: no engine profile
    profile = EngineProfile.model_validate({
        "model": "tiny", "onnx": "tiny.onnx",
        "calibration": {"model_profile": str(env.root / "processing.yaml"),
                        "sources": [{"path": str(DARKNET / f"{n}.jpg")} for n in names]}}).located_in(env.engines)
    return frame_set(profile, "calibration", env.models, model_profile_for(profile))


def _build(env: EngineEnv, profile: EngineProfile | None = None, onnx: Path | None = None,
           progress: list[tuple[float, str]] | None = None) -> dict[str, Any]:
    """One real TensorRTBuilder.build of the env's ONNX into the env's state dir."""
    out = env.root / "build" / "model.plan"
    out.parent.mkdir(exist_ok=True)
    timing_dir = env.state / "timing"
    timing_dir.mkdir(parents=True, exist_ok=True)
    seen = progress if progress is not None else []
    return _StandInGpuBuilder().build(inspect_onnx(onnx or env.models / "tiny.onnx"), profile or env.profile(), out,
                                      lambda frac, msg: seen.append((frac, msg)), timing_dir)


def _profile(env: EngineEnv, **tensorrt: Any) -> EngineProfile:
    write_profile(env.engines, tensorrt=tensorrt)
    return env.profile()


@pytest.mark.parametrize("precision, flags", [("fp32", set()), ("fp16", {BuilderFlag.FP16})])
def test_precision_sets_the_builder_flags(env: EngineEnv, gpu: StandInGpu, precision: str, flags: set[str]) -> None:
    details = _build(env, _profile(env, precision=precision))
    assert gpu.config.flags == flags and details["precision"] == precision
    assert not gpu.network.strongly_typed and details["network"] == "weakly typed"
    assert (env.root / "build" / "model.plan").read_bytes() == gpu.plan


def test_workspace_pool_and_optimization_level(env: EngineEnv, gpu: StandInGpu) -> None:
    details = _build(env, _profile(env, workspace_mib=256, optimization_level=5))
    assert gpu.config.pool_limits == {MemoryPoolType.WORKSPACE: 256 << 20}
    assert gpu.config.builder_optimization_level == 5 and details["workspace_mib"] == 256


@pytest.mark.parametrize("version, network_flags", [("8.6.1", 1 << 0), ("10.3.0", 0)])
def test_explicit_batch_flag_only_before_tensorrt_10(env: EngineEnv, gpu: StandInGpu, monkeypatch: pytest.MonkeyPatch,
                                                     version: str, network_flags: int) -> None:
    gpu.version = version
    monkeypatch.setitem(sys.modules, "tensorrt", make_tensorrt(gpu))
    assert _build(env)["tensorrt_version"] == version
    assert gpu.network.flags == network_flags


def test_one_optimization_profile_spans_the_batch_range(env: EngineEnv, gpu: StandInGpu) -> None:
    details = _build(env)  # the env's profile: batch min 1, opt 2, max 4
    [profile] = gpu.config.profiles
    assert profile.shapes == {"images": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}
    assert details["shapes"] == {"images": {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}}


def test_dynamic_dims_come_from_the_profile_or_are_named(env: EngineEnv, gpu: StandInGpu) -> None:
    onnx = make_onnx(env.models / "dynamic.onnx", height="H")
    write_profile(env.engines, batch={"min": 2, "opt": 2, "max": 8}, inputs={"images": {"dims": [3, 16, 8]}})
    _build(env, onnx=onnx)
    assert gpu.config.profiles[0].shapes == {"images": ((2, 3, 16, 8), (2, 3, 16, 8), (8, 3, 16, 8))}
    write_profile(env.engines)
    with pytest.raises(BuildError, match=r"profile cannot shape input 'images': .*dim 2 is dynamic"):
        _build(env, onnx=onnx)


@pytest.mark.parametrize("fallback", [True, False])
def test_dla_core_with_and_without_gpu_fallback(env: EngineEnv, gpu: StandInGpu, fallback: bool) -> None:
    gpu.dla_cores = 2
    details = _build(env, _profile(env, precision="fp16", dla_core=1, gpu_fallback=fallback))
    assert gpu.config.default_device_type == DeviceType.DLA and gpu.config.DLA_core == 1
    assert (BuilderFlag.GPU_FALLBACK in gpu.config.flags) is fallback and details["dla_core"] == 1


def test_no_dla_leaves_the_gpu_default(env: EngineEnv, gpu: StandInGpu) -> None:
    _build(env)
    assert gpu.config.default_device_type == DeviceType.GPU and BuilderFlag.GPU_FALLBACK not in gpu.config.flags


def test_dla_core_the_device_lacks_is_a_clear_build_error(env: EngineEnv, gpu: StandInGpu) -> None:
    write_profile(env.engines, tensorrt={"precision": "fp16", "dla_core": 0})  # gpu.dla_cores == 0: a PC GPU
    with pytest.raises(EngineBuildError, match=r"build failed: profile tensorrt\.dla_core=0 but this device has "
                                               r"0 DLA core\(s\)") as err:
        env.manager(builder=_StandInGpuBuilder()).ensure(env.profile())
    assert err.value.phase == "build" and not (env.state / "engines" / "tiny").exists()


def test_timing_cache_is_saved_after_the_build_then_reused(env: EngineEnv, gpu: StandInGpu) -> None:
    first = _build(env)
    cache_file = Path(first["timing_cache"])
    assert cache_file == env.state / "timing" / "tensorrt-10.3.0-Orin__stand_in__sm8_7.cache"  # per version, GPU
    assert first["timing_cache_reused"] is False and gpu.timing_blobs == [b""]  # a new, empty cache attached
    saved = cache_file.read_bytes()
    assert saved == gpu.config.timing_cache.serialize() and saved.endswith(b" 1")  # this build's timings
    second = _build(env)
    assert second["timing_cache_reused"] is True and gpu.timing_blobs[-1] == saved
    assert cache_file.read_bytes().endswith(b" 2")  # the reused cache, grown by the second build, saved again


@pytest.mark.parametrize("stale", [b"\x00\x01truncated by a power loss", b"STANDIN-TIMING-CACHE Xavier (stand-in) 7"],
                         ids=["corrupt", "another-device"])
def test_unusable_timing_cache_is_ignored_with_a_warning(env: EngineEnv, gpu: StandInGpu, stale: bytes,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    cache_file = Path(_build(env)["timing_cache"])
    cache_file.write_bytes(stale)
    caplog.set_level(logging.WARNING, logger="appliance.detector.engines.builders.trt")
    details = _build(env)
    assert details["timing_cache_reused"] is False
    assert any("unreadable or does not match this device; starting a new one" in r.getMessage() and str(cache_file) in
               r.getMessage() for r in caplog.records)
    assert gpu.config.timing_cache.device == gpu.name  # a fresh cache was attached instead
    assert cache_file.read_bytes() == gpu.config.timing_cache.serialize()  # and replaced the stale file


def test_timing_cache_off_touches_no_cache(env: EngineEnv, gpu: StandInGpu) -> None:
    details = _build(env, _profile(env, timing_cache=False))
    assert details["timing_cache"] is None and gpu.timing_blobs == [] and gpu.config.timing_cache is None
    assert not list((env.state / "timing").iterdir())


def test_parser_errors_surface_as_a_build_error_naming_them(env: EngineEnv, gpu: StandInGpu,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    gpu.parse_errors = ["In node 2 (importFallbackPluginImporter): UNSUPPORTED_NODE: no importer for op: Yolo"]
    with pytest.raises(EngineBuildError) as err:
        env.manager(builder=_StandInGpuBuilder()).ensure(env.profile())
    assert err.value.phase == "build"
    assert f"TensorRT's ONNX parser rejected {env.models / 'tiny.onnx'}: In node 2" in str(err.value)
    assert "UNSUPPORTED_NODE: no importer for op: Yolo" in str(err.value)
    # TensorRT's own log lines reach the journal through the builder's logger, at their severity
    assert any(r.levelno == logging.ERROR and r.getMessage().startswith("TensorRT: In node 2") for r in caplog.records)


def test_a_failed_build_is_a_clear_error(env: EngineEnv, gpu: StandInGpu) -> None:
    gpu.plan = None  # what build_serialized_network returns when TensorRT gives up
    with pytest.raises(BuildError, match="TensorRT could not build tiny; see the TensorRT log lines above"):
        _build(env)


def test_progress_is_reported_and_never_goes_back(env: EngineEnv, gpu: StandInGpu) -> None:
    progress: list[tuple[float, str]] = []
    _build(env, progress=progress)
    fractions = [frac for frac, _ in progress]
    assert progress[0] == (0.0, "parsing ONNX") and progress[-1] == (1.0, "engine serialized")
    assert any(msg.startswith("building fp16 engine (TensorRT 10.3.0") for _, msg in progress)
    monitor = [frac for frac, msg in progress if msg == "Building engine"]
    assert len(monitor) == 3 and monitor[-1] == 1.0  # start + 2 steps of the top-level phase
    assert not any(msg == "Tactic timing" for _, msg in progress)  # nested phases do not move the bar
    assert fractions == sorted(fractions), fractions  # an operator must never see the percentage drop


def _quantized(env: EngineEnv) -> Path:
    """The tiny model quantized the way every int8 build quantizes, calibrated on six real darknet images."""
    out = env.models / "tiny-int8.onnx"
    build_int8_model(env.models / "tiny.onnx", "images", _frames(env), QuantizationProfile(), out, None)
    return out


@pytest.mark.parametrize("version, strongly_typed, flags", [
    ("10.3.0", True, set()),  # types from the Q/DQ model; TensorRT 10 refuses precision flags on such a network
    ("8.6.1", False, {BuilderFlag.INT8, BuilderFlag.FP16}),  # weakly typed: INT8 for the Q/DQ, FP16 for the rest
])
def test_int8_builds_the_quantized_model_explicitly(env: EngineEnv, gpu: StandInGpu, monkeypatch: pytest.MonkeyPatch,
                                                    version: str, strongly_typed: bool, flags: set[str]) -> None:
    gpu.version = version
    monkeypatch.setitem(sys.modules, "tensorrt", make_tensorrt(gpu))
    quantized = _quantized(env)
    details = _build(env, _profile(env, precision="int8"), onnx=quantized)
    assert gpu.network.strongly_typed is strongly_typed and gpu.config.flags == flags
    assert details["network"] == ("strongly typed" if strongly_typed else "weakly typed")
    assert not hasattr(gpu.config, "int8_calibrator")  # no implicit calibration: nothing was handed a calibrator
    assert sorted(p.name for p in (env.state / "timing").iterdir()) == [Path(details["timing_cache"]).name]
    assert (env.root / "build" / "model.plan").read_bytes() == gpu.plan


def test_the_stand_in_refuses_precision_flags_on_a_strongly_typed_network(gpu: StandInGpu) -> None:
    """What makes the test above able to fail: TensorRT 10 stops such a build, and so does the stand-in."""
    import tensorrt  # the stand-in, from sys.modules

    class Recorder(tensorrt.ILogger):
        messages: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            self.messages.append(msg)

    builder = tensorrt.Builder(Recorder())
    network = builder.create_network(1 << tensorrt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    config = builder.create_builder_config()
    config.set_flag(BuilderFlag.INT8)
    assert builder.build_serialized_network(network, config) is None
    assert "API Usage Error" in Recorder.messages[-1] and "kINT8" in Recorder.messages[-1]


def test_int8_of_a_model_without_qdq_is_a_build_error(env: EngineEnv, gpu: StandInGpu) -> None:
    with pytest.raises(BuildError, match=r"int8 builds a quantized \(Q/DQ\) model; this network has no Q/DQ layers"):
        _build(env, _profile(env, precision="int8"))
    assert gpu.config.flags == set()


def test_the_quantized_model_keeps_to_tensorrt_rules_and_the_old_form_does_not(env: EngineEnv) -> None:
    """Signed int8 with zero points of 0 (checked here on the file, independently of check_quantized); ONNX
    Runtime's uint8 asymmetric activations, the form TensorRT's parser rejects, fail the check."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    from appliance.detector.engines.quantize import _FrameReader

    model = onnx.load(str(_quantized(env)))
    inits = {i.name: i for i in model.graph.initializer}
    zeros = [inits[n.input[2]] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert zeros and all(z.data_type == onnx.TensorProto.INT8 and not numpy_helper.to_array(z).any() for z in zeros)
    assert check_quantized(model, []).int8_convs
    old = env.models / "tiny-uint8.onnx"
    quantize_static(str(env.models / "tiny.onnx"), str(old), _FrameReader("images", _frames(env).tensors),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    with pytest.raises(QdqCheckError, match="not an int8 initializer.*dequantizes a INT32 initializer"):
        check_quantized(onnx.load(str(old)), [])


def test_load_sets_the_dla_core_and_names_a_plan_that_does_not_deserialize(env: EngineEnv, gpu: StandInGpu) -> None:
    plan = env.root / "model.plan"
    plan.write_bytes(b"a plan from another TensorRT")
    with pytest.raises(BuildError, match=r"model\.plan does not deserialize with TensorRT 10\.3\.0 \(corrupt, or "
                                         r"built for another GPU/TensorRT\)"):
        _StandInGpuBuilder().load(plan, _profile(env, precision="fp16", dla_core=1))
    assert gpu.runtime.deserialized == [(b"a plan from another TensorRT", 1)]  # DLA core set before deserializing
