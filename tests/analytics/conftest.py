"""Fixtures for the analytics tests: the real detector's detections on segments of OpenCV's vtest.avi (people
walking, 768x576 at 10 fps), computed once per session with ONNX Runtime through the plain pipeline
(appliance.detector.prepost.pipeline, the same pre/post code the Triton models run) and cached as JSON in the
session's temporary directory. Frames 0..149 are the segment the tracker's settings were tuned on; frames
150..449 are held out (never used for tuning) to check those settings on walks they were not fitted to."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

from appliance.detections import Detections
from appliance.detector.prepost.pipeline import Postprocessor, Preprocessor
from appliance.detector.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
SEGMENT_FRAMES = 150   # frames 0..149: 15 s of the scene
HELDOUT_START, HELDOUT_FRAMES = 150, 300   # frames 150..449: the 30 s after it
LOW_SCORE = 0.1        # the detector reports down to ByteTrack's low score, so its second stage has work


def detect_video(video: Path, onnx: Path, frames: int, start: int = 0) -> list[dict]:
    """Per frame from ``start``: boxes, scores, class ids of the real detector (profile thresholds lowered to
    LOW_SCORE). Frames before ``start`` are decoded and dropped: seeking an AVI by frame index is not exact."""
    profile = load_profile(REPO / "repository" / "profiles" / "yolov3-tiny.yaml")
    profile = profile.model_copy(update={"thresholds": profile.thresholds.model_copy(update={"score": LOW_SCORE})})
    pre, post = Preprocessor(profile), Postprocessor(profile)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    cap = cv2.VideoCapture(str(video))
    out = []
    try:
        for _ in range(start):
            assert cap.read()[0], f"{video} ended before frame {start}"
        for _ in range(frames):
            ok, frame = cap.read()
            assert ok, f"{video} ended before {start + frames} frames"
            tensor, lb = pre.frame(frame, "BGR")
            det = post(session.run(None, {name: tensor[None]})[0][0], lb)
            out.append({"boxes": det.boxes.tolist(), "scores": det.scores.tolist(),
                        "class_ids": det.class_ids.tolist()})
    finally:
        cap.release()
    return out


@pytest.fixture(scope="session")
def vtest_video() -> Path:
    assert VTEST.is_file(), f"{VTEST} missing: scripts/setup.d/40-vtest.sh fetches it (scripts/setup.sh runs it)"
    return VTEST


def cached_detections(cache: Path, video: Path, onnx: Path, frames: int, start: int = 0) -> list[Detections]:
    """detect_video's output, computed on the first call and read back from ``cache`` after it."""
    if not cache.exists():
        cache.write_text(json.dumps(detect_video(video, onnx, frames, start)))
    return [Detections.untracked(np.asarray(f["boxes"], dtype=np.float32).reshape(-1, 4),
                                 np.asarray(f["scores"], dtype=np.float32), np.asarray(f["class_ids"], dtype=np.int64))
            for f in json.loads(cache.read_text())]


@pytest.fixture(scope="session")
def vtest_detections(vtest_video: Path, detector_onnx: Path,
                     tmp_path_factory: pytest.TempPathFactory) -> list[Detections]:
    """The detector's output on frames 0..SEGMENT_FRAMES-1 of vtest.avi, computed once per session."""
    return cached_detections(tmp_path_factory.getbasetemp() / "vtest-detections.json", vtest_video, detector_onnx,
                             SEGMENT_FRAMES)


@pytest.fixture(scope="session")
def vtest_heldout_detections(vtest_video: Path, detector_onnx: Path,
                             tmp_path_factory: pytest.TempPathFactory) -> list[Detections]:
    """The detector's output on the held-out frames HELDOUT_START.. (HELDOUT_FRAMES of them), once per session."""
    return cached_detections(tmp_path_factory.getbasetemp() / "vtest-heldout-detections.json", vtest_video,
                             detector_onnx, HELDOUT_FRAMES, HELDOUT_START)
