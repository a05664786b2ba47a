"""The manager's fallbacks with the shipped detector profile (engines/yolov3-tiny.yaml): a reduced-precision
engine the detection gate refuses is not installed and the profile's fallback precision is; and a reduced
precision whose calibration or gate frames are missing on the device (a Jetson image without the sample video)
builds the fallback, else fp32, with the reason logged, in ``refused`` and in a ``.failed`` record.

The reduced-precision builder is a stand-in (no GPU here): it reads the profile's ``tensorrt`` section as
TensorRTBuilder does (precision, fallback), builds with ONNX Runtime in fp32, and its fp16 runner damages what
matters: every row whose objectness is above 0.5 gets objectness 0. On the verification's random inputs no row is
that confident, so the tensor check passes; on real frames the confident detections vanish, which only the gate
sees."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.detector.buildprofile import EngineProfile, load_profile
from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder, OrtRunner
from appliance.detector.engines.builders.trt import TensorRTBuilder
from appliance.detector.engines.fingerprint import DeviceProbe
from appliance.detector.engines.manager import EngineManager
from appliance.detector.engines.progress import ProgressEvent, ProgressReporter

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "engines" / "yolov3-tiny.yaml"


class _DamagedRunner:
    def __init__(self, runner: OrtRunner) -> None:
        self._runner = runner

    def io(self) -> Any:
        return self._runner.io()

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {name: np.array(value, copy=True) for name, value in self._runner.run(feeds).items()}
        rows = out["output"]
        rows[..., 4] = np.where(rows[..., 4] > 0.5, 0.0, rows[..., 4])
        return out

    def close(self) -> None:
        self._runner.close()


class ReducedPrecisionStandIn(OnnxRuntimeBuilder):
    """TensorRT's precision and fallback rules, ONNX Runtime's fp32 engine, a damaging fp16 runner."""

    name = "reduced-precision-standin"

    def precision(self, profile: EngineProfile) -> str:
        return profile.tensorrt.precision

    def fallback(self, profile: EngineProfile) -> EngineProfile | None:
        return TensorRTBuilder.fallback(self, profile)  # type: ignore[arg-type]

    def build(self, onnx: Any, profile: EngineProfile, out_path: Path, progress: Any, timing_dir: Path,
              calibration: Any = None) -> dict[str, object]:
        return super().build(onnx, profile.as_fp32(), out_path, progress, timing_dir)

    def load(self, engine_path: Path, profile: EngineProfile) -> Any:
        runner = super().load(engine_path, profile.as_fp32())
        return runner if profile.tensorrt.precision == "fp32" else _DamagedRunner(runner)


def _shipped(tmp_path: Path, **onnxruntime: object) -> EngineProfile:
    """The shipped profile, pre/post left out of the graph (the stand-in runs ONNX Runtime, not EfficientNMS)."""
    data = load_profile(SHIPPED).model_dump(mode="json")
    data["in_graph"] = False
    data["onnxruntime"].update(onnxruntime)
    return EngineProfile.model_validate(data).located_in(SHIPPED.parent)


def _manager(tmp_path: Path, models: Path, builder: OnnxRuntimeBuilder, events: list[ProgressEvent]) -> EngineManager:
    return EngineManager(tmp_path / "state", models, builder, device=DeviceProbe(tmp_path / "dev"),
                         reporter=ProgressReporter(callback=events.append))


@pytest.fixture
def models_without_sample(tmp_path: Path, detector_onnx: Path) -> Path:
    """A models root like the Jetson image's: the detector, no sample/sample.mp4."""
    root = tmp_path / "models"
    (root / "yolov3-tiny").mkdir(parents=True)
    (root / "yolov3-tiny" / "model.onnx").symlink_to(detector_onnx)
    return root


def test_the_shipped_tensorrt_fallback_is_fp32() -> None:
    shipped = load_profile(SHIPPED)
    assert shipped.tensorrt.precision == "fp16" and shipped.tensorrt.fallback == "fp32"


def test_a_refused_fp16_engine_is_not_installed_and_the_shipped_fallback_is(tmp_path: Path,
                                                                            detector_onnx: Path) -> None:
    models = tmp_path / "models"
    (models / "sample").mkdir(parents=True)
    (models / "sample" / "sample.mp4").symlink_to(REPO / ".models" / "sample" / "sample.mp4")
    (models / "yolov3-tiny").mkdir()
    (models / "yolov3-tiny" / "model.onnx").symlink_to(detector_onnx)
    events: list[ProgressEvent] = []
    engine = _manager(tmp_path, models, ReducedPrecisionStandIn(), events).ensure(_shipped(tmp_path))
    assert engine.precision == "fp32" and not engine.cache_hit
    assert engine.refused is not None and "detection gate REFUSED: recall" in engine.refused
    refused = [e for e in events if e.phase == "failed"]
    assert refused and refused[0].gate is not None and not refused[0].gate["passed"]
    assert refused[0].gate["recall"] < 0.95 and refused[0].gate["reference_detections"] > 50
    record = json.loads(next((tmp_path / "state" / "engines" / ".failed").glob("yolov3-tiny-*.json")).read_text())
    assert record["kind"] == "gate" and record["fingerprint"]["precision"] == "fp16"
    manifest = json.loads(engine.manifest_path.read_text())
    assert manifest["precision"] == "fp32" and manifest["fingerprint"]["precision"] == "fp32"


def test_fp16_without_its_gate_frames_builds_fp32_and_says_why(tmp_path: Path, models_without_sample: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """The Jetson first boot without the sample video: fp16 cannot be gated, so fp32 is served, not nothing."""
    events: list[ProgressEvent] = []
    with caplog.at_level(logging.WARNING, "appliance.detector.engines"):
        engine = _manager(tmp_path, models_without_sample, ReducedPrecisionStandIn(), events).ensure(
            _shipped(tmp_path))
    missing = models_without_sample / "sample" / "sample.mp4"
    assert engine.precision == "fp32"
    assert engine.refused == f"fp16 needs frames this device lacks: {missing}: frame source not found"
    assert any("building fp32 instead" in r.getMessage() and str(missing) in r.getMessage() for r in caplog.records)
    assert any(e.phase == "build" and "building fp32 instead" in e.message for e in events)
    record = json.loads((tmp_path / "state" / "engines" / ".failed" / "yolov3-tiny-fp16-frames.json").read_text())
    assert record["kind"] == "frames" and record["built_instead"] == "fp32" and str(missing) in record["summary"]
    # The file in place: the next start tries fp16 again (and here its gate refuses the damaged engine).
    (models_without_sample / "sample").mkdir()
    (models_without_sample / "sample" / "sample.mp4").symlink_to(REPO / ".models" / "sample" / "sample.mp4")
    again = _manager(tmp_path, models_without_sample, ReducedPrecisionStandIn(), []).ensure(_shipped(tmp_path))
    assert again.precision == "fp32" and again.refused is not None and "detection gate REFUSED" in again.refused


def test_int8_without_its_calibration_frames_builds_the_fp32_fallback(tmp_path: Path,
                                                                       models_without_sample: Path) -> None:
    engine = _manager(tmp_path, models_without_sample, OnnxRuntimeBuilder(), []).ensure(
        _shipped(tmp_path, precision="int8"))
    assert engine.precision == "fp32" and engine.builder == "onnxruntime"
    assert engine.refused is not None and engine.refused.startswith("int8 needs frames this device lacks: ")
    assert "sample.mp4: frame source not found" in engine.refused


def test_fp32_with_a_missing_onnx_is_still_an_error(tmp_path: Path, models_without_sample: Path) -> None:
    """Only frames degrade: a missing model is not something a lower precision can work around."""
    from appliance.detector.engines.manager import EngineBuildError

    (models_without_sample / "yolov3-tiny" / "model.onnx").unlink()
    with pytest.raises(EngineBuildError, match="ONNX file .* not found"):
        _manager(tmp_path, models_without_sample, ReducedPrecisionStandIn(), []).ensure(_shipped(tmp_path))
