"""The int8 model a Jetson's TensorRT builds, made and checked on this CPU host: the shipped profile's quantization
of the real detector on its real calibration frames, wrapped with the EfficientNMS pre/post, exactly as the build
hands it to TensorRT. It passes the ONNX checker, keeps TensorRT's Q/DQ rules and the profile's float layers,
ONNX Runtime's detections on its network pass the shipped gate, and the TensorRT builder (the recording stand-in,
tests/engines/trt_standin.py) builds it explicitly. The real TensorRT build is the `gpu` test in
test_engines_tensorrt.py."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import onnx
import pytest
from engines_helpers import REPO
from onnx import TensorProto, numpy_helper

from appliance.detector.buildprofile import EngineProfile, load_profile
from appliance.detector.engines.acceptance import calibration_frames, gate_frames
from appliance.detector.engines.builders.ort import reference_session
from appliance.detector.engines.builders.trt import TensorRTBuilder
from appliance.detector.engines.gate import run_gate
from appliance.detector.engines.onnxinfo import inspect_onnx
from appliance.detector.engines.quantize import build_int8_model
from appliance.detector.profile import load_profile as load_model_profile
from appliance.detector.repository.wrap import FRAME_INPUT, OUTPUTS, PREFIX, WrapSpec
from tests.engines.trt_standin import StandInGpu, make_tensorrt

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("detector_onnx", "darknet_images")]
MODELS = REPO / ".models"


@pytest.fixture(scope="module")
def shipped() -> EngineProfile:
    profile = load_profile(REPO / "engines" / "yolov3-tiny.yaml")
    return profile.model_copy(update={"tensorrt": profile.tensorrt.model_copy(update={"precision": "int8"})})


@pytest.fixture(scope="module")
def artifact(shipped: EngineProfile, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """The file the build hands TensorRT for the shipped profile at int8, and the build's details."""
    out = tmp_path_factory.mktemp("int8-tensorrt") / "int8.onnx"
    processing = load_model_profile(REPO / "repository" / "profiles" / "yolov3-tiny.yaml")
    frames = calibration_frames(shipped, "int8", MODELS, out.parent, None)
    with contextlib.redirect_stdout(sys.stderr):  # ORT's calibrator prints its progress
        details = build_int8_model(shipped.onnx_path(MODELS), "images", frames, shipped.quantization, out,
                                   WrapSpec.from_profile(processing, nms="trt"))
    return out, details


def test_it_passes_the_checker_and_keeps_tensorrt_rules(artifact: tuple[Path, dict[str, object]],
                                                        shipped: EngineProfile) -> None:
    path, details = artifact
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert details["calibration_frames"] == 64
    # TensorRT quantizes symmetrically to signed int8: every zero point an int8 0
    inits = {i.name: i for i in model.graph.initializer}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    zeros = [inits[n.input[2]] for n in qdq]
    assert qdq and all(z.data_type == TensorProto.INT8 and not numpy_helper.to_array(z).any() for z in zeros)
    assert not [n.name for n in qdq if n.name.startswith(PREFIX)]  # the pre/post stays float
    # the Convs the profile keeps float take float weights; the other ten of the detector's 13 take int8 ones
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    convs = {n.name: producers.get(n.input[1]) for n in model.graph.node if n.op_type == "Conv"}
    float_convs = {name for name in shipped.quantization.float_nodes if name.startswith("conv")}
    assert len(convs) == 13 and {n for n, src in convs.items() if src != "DequantizeLinear"} == float_convs
    assert [i.name for i in model.graph.input] == [FRAME_INPUT]
    assert [o.name for o in model.graph.output] == list(OUTPUTS)
    assert [n.op_type for n in model.graph.node].count("EfficientNMS_TRT") == 1
    assert details["quantized"]["int8_convs"] == 10  # type: ignore[index]


def test_onnx_runtime_detections_on_its_network_pass_the_shipped_gate(artifact: tuple[Path, dict[str, object]],
                                                                      shipped: EngineProfile, tmp_path: Path) -> None:
    """The network inside the artifact (from the preprocess's output to the head, the bytes TensorRT gets) run by
    ONNX Runtime, through the Python decode and NMS, against the fp32 detector on the held-out frames."""
    network = tmp_path / "network.onnx"
    onnx.utils.extract_model(str(artifact[0]), str(network), ["images"], ["output"])
    candidate = reference_session(network)
    plain = reference_session(shipped.onnx_path(MODELS))
    processing, held_out = gate_frames(shipped, MODELS, None, None)
    report = run_gate(lambda feeds: {"output": candidate.run(["output"], feeds)[0]},
                      lambda feeds: {"output": plain.run(["output"], feeds)[0]},
                      held_out, processing, shipped.gate, "images", "output")
    assert report.passed, report.summary()
    assert report.frames == 33 and report.reference_detections >= 100


@pytest.mark.parametrize("version, network", [("10.3.0", "strongly typed"), ("8.6.1", "weakly typed")])
def test_the_tensorrt_builder_builds_it_explicitly(artifact: tuple[Path, dict[str, object]], shipped: EngineProfile,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str,
                                                  network: str) -> None:
    gpu = StandInGpu(version=version)
    monkeypatch.setitem(sys.modules, "tensorrt", make_tensorrt(gpu))

    class Builder(TensorRTBuilder):
        def device_fields(self) -> dict[str, str]:  # libcuda's identity, not probed here
            return {"gpu_name": "Orin (stand-in)", "gpu_cc": "8.7", "cuda_driver": "12.2"}

    details = Builder().build(inspect_onnx(artifact[0]), shipped, tmp_path / "model.plan", lambda f, m: None,
                              tmp_path)
    assert details["precision"] == "int8" and details["network"] == network
    assert [i.name for i in gpu.network.inputs] == [FRAME_INPUT] and gpu.network.outputs == list(OUTPUTS)
    assert details["shapes"][FRAME_INPUT]["max"] == [4, 416, 416, 3]
    assert not hasattr(gpu.config, "int8_calibrator")
