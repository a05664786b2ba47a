"""INT8 on the real detector with real ONNX Runtime: calibration on distinct real frames, the detection gate's two
outcomes (a passing engine is installed with its numbers; a harmful quantization is refused with its numbers and
the fallback precision is built), and the calibration set's hash in the engine fingerprint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.schemas import validate_message

from appliance.detector.buildprofile import EngineProfile, load_profile
from appliance.detector.calibration.frames import CalibrationError, frame_set, model_profile_for
from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder
from appliance.detector.engines.fingerprint import DeviceProbe
from appliance.detector.engines.manager import EngineBuildError, EngineManager
from appliance.detector.engines.progress import ProgressEvent, ProgressReporter
from appliance.mqtt.messages import engine_status_payload

REPO = Path(__file__).resolve().parents[2]
DARKNET = Path("/usr/share/darknet/data")
SAMPLE = REPO / ".models" / "sample" / "sample.mp4"


@pytest.fixture
def frames_dir(tmp_path: Path) -> Path:
    """A models root with the real detector linked in and copies of the darknet images (so tests may edit them)."""
    root = tmp_path / "models"
    (root / "yolov3-tiny").mkdir(parents=True)
    (root / "yolov3-tiny" / "model.onnx").symlink_to(REPO / ".models" / "yolov3-tiny" / "model.onnx")
    (root / "sample").mkdir()
    (root / "sample" / "sample.mp4").symlink_to(SAMPLE)
    for split, names in (("calib", ("dog", "eagle", "giraffe", "scream")), ("held", ("horses", "kite", "person"))):
        (root / split).mkdir()
        for name in names:
            shutil.copy(DARKNET / f"{name}.jpg", root / split / f"{name}.jpg")
    return root


def _profile(tmp_path: Path, **quantization: object) -> EngineProfile:
    """The shipped profile at int8 with small frame sets (the gate floors and the quantization as shipped unless
    overridden)."""
    shipped = load_profile(REPO / "engines" / "yolov3-tiny.yaml")
    data = shipped.model_dump(mode="json")
    data["onnxruntime"]["precision"] = "int8"
    data["quantization"].update(quantization)
    data["calibration"]["sources"] = [{"path": "calib"}, {"path": "sample/sample.mp4", "frames": 6, "end_s": 6.0}]
    data["gate"]["sources"] = [{"path": "held"}, {"path": "sample/sample.mp4", "frames": 6, "start_s": 6.0}]
    return EngineProfile.model_validate(data).located_in(tmp_path)


def _manager(tmp_path: Path, models: Path, events: list[ProgressEvent]) -> EngineManager:
    return EngineManager(tmp_path / "state", models, OnnxRuntimeBuilder(), device=DeviceProbe(tmp_path / "dev"),
                         reporter=ProgressReporter(callback=events.append))


def test_calibration_frames_are_distinct_real_frames_through_the_inference_preprocess(
        frames_dir: Path, tmp_path: Path, detector_onnx: Path) -> None:
    profile = _profile(tmp_path)
    frames = frame_set(profile, "calibration", frames_dir, model_profile_for(profile))
    assert [f.name for f in frames.frames[:4]] == ["dog.jpg", "eagle.jpg", "giraffe.jpg", "scream.jpg"]
    assert len(frames.tensors) == 10 and len({t.tobytes() for t in frames.tensors}) == 10
    # Independent reference for dog.jpg (768x576): scale 416/768 -> 416x312, pad 52 rows of 127 above and below,
    # RGB, /255, CHW: what darknet feeds YOLOv3-tiny.
    bgr = cv2.imread(str(DARKNET / "dog.jpg"))
    resized = cv2.resize(bgr, (416, 312), interpolation=cv2.INTER_LINEAR)
    canvas = np.full((416, 416, 3), 127, np.uint8)
    canvas[52:364] = resized
    want = canvas[:, :, ::-1].transpose(2, 0, 1).astype(np.float32) / 255
    assert frames.tensors[0].shape == (3, 416, 416)
    assert np.abs(frames.tensors[0] - want).max() < 1 / 255 + 1e-6


def test_a_repeated_frame_or_a_missing_source_is_refused(frames_dir: Path, tmp_path: Path,
                                                         detector_onnx: Path) -> None:
    shutil.copy(frames_dir / "calib" / "dog.jpg", frames_dir / "calib" / "dog-again.jpg")
    profile = _profile(tmp_path)
    with pytest.raises(CalibrationError, match="identical after preprocessing"):
        frame_set(profile, "calibration", frames_dir, model_profile_for(profile))
    shutil.rmtree(frames_dir / "held")
    with pytest.raises(CalibrationError, match="held: frame source not found"):
        frame_set(profile, "gate", frames_dir, model_profile_for(profile))


def test_the_calibration_set_is_in_the_fingerprint(frames_dir: Path, tmp_path: Path, detector_onnx: Path) -> None:
    manager = _manager(tmp_path, frames_dir, [])
    profile = _profile(tmp_path)
    onnx = frames_dir / "yolov3-tiny" / "model.onnx"
    before = manager.fingerprint(profile, onnx)
    assert before.fields["precision"] == "int8" and "calibration_sha256" in before.fields
    shutil.copy(DARKNET / "eagle.jpg", frames_dir / "calib" / "another.jpg")  # one more calibration frame
    after = manager.fingerprint(profile, onnx)
    assert after.key != before.key
    assert set(after.diff(before.fields)) == {"calibration_sha256"}
    fp32 = manager.fingerprint(profile.model_copy(update={"onnxruntime": profile.onnxruntime.model_copy(
        update={"precision": "fp32"})}), onnx)
    assert "calibration_sha256" not in fp32.fields and "gate_sha256" not in fp32.fields


def test_int8_with_the_head_in_float_passes_the_gate_it_is_given(frames_dir: Path, tmp_path: Path,
                                                                  detector_onnx: Path) -> None:
    """Floors of 0.85, since this test's small frame sets (9 gate frames) are not the shipped ones the 0.95
    floors were measured on (docs/engines.md): installed as int8 with the numbers, which the engine status
    payload (MQTT engines/status) carries as its ``gate`` object."""
    profile = _profile(tmp_path)
    profile = profile.model_copy(update={"gate": profile.gate.model_copy(
        update={"min_recall": 0.85, "min_precision": 0.85})})
    events: list[ProgressEvent] = []
    engine = _manager(tmp_path, frames_dir, events).ensure(profile)
    assert engine.precision == "int8" and engine.refused is None
    manifest = json.loads(engine.manifest_path.read_text())
    # pre/post wrapped around the quantized model (all float), and the gate ran on that in-graph engine
    assert engine.in_graph and manifest["build"]["in_graph"]["when"] == "after"
    assert [t["name"] for t in engine.inputs] == ["FRAME"]
    gate = manifest["verification"]["gate"]
    assert gate["passed"] and gate["recall"] >= 0.85 and gate["precision"] >= 0.85
    assert gate["reference_detections"] >= 20 and gate["frames"] == 9
    assert manifest["build"]["float_nodes"] and "calibration_sha256" in manifest["fingerprint"]
    assert manifest["fingerprint"]["quantizer"].startswith("onnxruntime ")
    # the shipped profile's float conv blocks stay in float beside the head; the served file is the checked one
    assert {"conv0_3", "leakyrelu_4", "conv2_8", "leakyrelu_9", "conv8_23"} <= set(manifest["build"]["float_nodes"])
    quantized = manifest["build"]["quantized"]
    assert quantized["sha256"] == manifest["engine_sha256"] == manifest["build"]["in_graph"]["graph_sha256"]
    assert quantized["float_convs"] == ["conv0_3", "conv2_8", "conv8_23"] and quantized["int8_convs"] == 10
    assert any(e.phase == "verify" and "detection gate passed: recall" in e.message for e in events)
    done = [e for e in events if e.phase == "done"]
    assert len(done) == 1 and done[0].gate is not None
    payload = engine_status_payload("dev1", done[0].to_dict(), 1_700_000_000.0)
    validate_message("engine_status", payload)
    assert payload["gate"]["passed"] is True and payload["gate"]["frames"] == 9
    assert (payload["gate"]["recall"], payload["gate"]["precision"]) == (gate["recall"], gate["precision"])
    assert payload["gate"]["min_recall"] == 0.85 and payload["gate"]["reference_detections"] >= 20
    cached: list[ProgressEvent] = []  # the next start's cache hit carries the numbers it was installed with
    _manager(tmp_path, frames_dir, cached).ensure(profile)
    assert [e.gate for e in cached if e.phase == "cached"] == [done[0].gate]


def test_a_harmful_quantization_is_refused_with_numbers_and_the_fallback_is_built(
        frames_dir: Path, tmp_path: Path, detector_onnx: Path) -> None:
    """The whole graph quantized, decode head included: objectness collapses, the gate refuses, fp32 is built."""
    profile = _profile(tmp_path, quantize_head=True)
    events: list[ProgressEvent] = []
    engine = _manager(tmp_path, frames_dir, events).ensure(profile)
    assert engine.precision == "fp32" and not engine.cache_hit
    assert engine.refused is not None and "detection gate REFUSED: recall" in engine.refused
    failed = [e for e in events if e.phase == "failed"]
    assert failed and "refused, not installed: detection gate REFUSED" in failed[0].message
    refusal = engine_status_payload("dev1", failed[0].to_dict(), 1_700_000_000.0)
    validate_message("engine_status", refusal)
    assert refusal["gate"]["passed"] is False and refusal["gate"]["recall"] < 0.5
    record = json.loads(next((tmp_path / "state" / "engines" / ".failed").glob("yolov3-tiny-*.json")).read_text())
    assert record["kind"] == "gate" and record["gate"]["recall"] < 0.5 and not record["gate"]["passed"]
    assert record["fingerprint"]["precision"] == "int8"
    # The next start does not quantize again to be refused again: straight to the cached fallback.
    events.clear()
    again = _manager(tmp_path, frames_dir, events).ensure(profile)
    assert again.cache_hit and again.precision == "fp32" and again.refused == engine.refused
    assert not any(e.phase == "build" and "calibrating" in e.message for e in events)


def test_a_float_node_the_graph_lacks_is_a_build_error_naming_it(frames_dir: Path, tmp_path: Path,
                                                                detector_onnx: Path) -> None:
    """A typo in quantization.float_nodes would otherwise quantize the layer it meant to keep in float."""
    profile = _profile(tmp_path, float_nodes=["conv0_3", "conv_typo"])
    with pytest.raises(EngineBuildError, match=r"float_nodes names nodes the graph does not have: \['conv_typo'\]"):
        _manager(tmp_path, frames_dir, []).ensure(profile)
    assert not list((tmp_path / "state" / "engines").glob("yolov3-tiny/*/manifest.json"))
