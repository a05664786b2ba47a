"""``appliance bench e2e``'s physical-limit baseline, detector plus decode: the detector alone (the same loop as
``bench_detector``) while the appliance's own capture processes decode every camera into its ring at the same
rates, the frames thrown away unread. What the appliance does beyond that (scheduling, Triton, results, sinks)
is what ``e2e_vs_detector_plus_decode`` measures."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from appliance.bench._e2e_baselines import bench_detector
from appliance.capture.config import CameraConfig
from appliance.capture.process import CaptureProcess


def bench_detector_plus_decode(cameras: Sequence[CameraConfig], onnx: Path, tensors: list[np.ndarray],
                               seconds: float) -> tuple[float, float]:
    """Frames/s and p50 ms of the detector alone while a capture process per camera (the appliance's, with the
    camera's config) writes its ring; nothing reads the rings, so each capture keeps overwriting its newest
    frame, as it does when the appliance skips frames."""
    shm_root = Path(tempfile.mkdtemp(prefix="appliance-bench-decode-", dir="/dev/shm"))
    captures = [CaptureProcess(camera, shm_root=shm_root) for camera in cameras]
    try:
        for capture in captures:
            capture.start()
        return bench_detector(onnx, tensors, seconds)
    finally:
        for capture in captures:
            capture.close()
        shutil.rmtree(shm_root, ignore_errors=True)
