"""Fixtures for the analytics tests: the real detector's detections on a segment of OpenCV's vtest.avi (people
walking, 768x576 at 10 fps), computed once per session with ONNX Runtime through the plain pipeline
(appliance.processing.pipeline, the same pre/post code the Triton models run) and cached as JSON in the
session's temporary directory."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from appliance.models.profile import load_profile
from appliance.processing.pipeline import Detections, Postprocessor, Preprocessor

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
SEGMENT_FRAMES = 150   # frames 0..149: 15 s of the scene
LOW_SCORE = 0.1        # the detector reports down to ByteTrack's low score, so its second stage has work


def detect_video(video: Path, onnx: Path, frames: int) -> list[dict]:
    """Per frame: boxes, scores, class ids of the real detector (profile thresholds lowered to LOW_SCORE)."""
    profile = load_profile(REPO / "repository" / "profiles" / "yolov3-tiny.yaml")
    profile = profile.model_copy(update={"thresholds": profile.thresholds.model_copy(update={"score": LOW_SCORE})})
    pre, post = Preprocessor(profile), Postprocessor(profile)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    cap = cv2.VideoCapture(str(video))
    out = []
    try:
        for _ in range(frames):
            ok, frame = cap.read()
            assert ok, f"{video} ended before {frames} frames"
            tensor, lb = pre.frame(frame, "BGR")
            det = post(session.run(None, {name: tensor[None]})[0][0], lb)
            out.append({"boxes": det.boxes.tolist(), "scores": det.scores.tolist(), "class_ids": det.class_ids.tolist()})
    finally:
        cap.release()
    return out


@pytest.fixture(scope="session")
def vtest_video() -> Path:
    assert VTEST.is_file(), f"{VTEST} missing: scripts/setup.d/40-vtest.sh fetches it (scripts/setup.sh runs it)"
    return VTEST


@pytest.fixture(scope="session")
def vtest_detections(vtest_video: Path, detector_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Detections]:
    """The detector's output on frames 0..SEGMENT_FRAMES-1 of vtest.avi, computed once per session."""
    cache = tmp_path_factory.getbasetemp() / "vtest-detections.json"
    if not cache.exists():
        cache.write_text(json.dumps(detect_video(vtest_video, detector_onnx, SEGMENT_FRAMES)))
    return [Detections(np.asarray(f["boxes"], dtype=np.float32).reshape(-1, 4),
                       np.asarray(f["scores"], dtype=np.float32), np.asarray(f["class_ids"], dtype=np.int32))
            for f in json.loads(cache.read_text())]
