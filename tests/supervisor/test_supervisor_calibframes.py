"""The calibration feed between the frame path and the collector (appliance/detector/calibration/collector.py): at most
one copy per camera per spread interval on the submit thread, a copy (the ring's memory is reused at once), RGB
frames kept as BGR, a full queue drops instead of waiting, and the feed ends itself once the set is complete."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import cv2
import numpy as np
from support.wait import wait_until

from appliance.detector.calibration.collector import CalibrationFeed, start_calibration_feed
from appliance.detector.calibration.device import CalibrationCollector

REPO = Path(__file__).resolve().parents[2]


def _frame(value: int) -> np.ndarray:
    frame = np.zeros((48, 64, 3), np.uint8)
    frame[:, :32] = value
    frame[:, 32:, 2] = 200  # the third channel of the right half: red in BGR, blue in RGB
    return frame


def test_frames_are_copied_spread_and_kept_as_bgr(tmp_path: Path) -> None:
    feed = CalibrationFeed(CalibrationCollector(tmp_path, "m", count=2, spread_s=1.0), "int8")
    ring = _frame(10)
    assert feed.offer("cam", ring, "bgr", 100.0)
    ring[:] = 0  # the ring slot is reused as soon as submit returns
    assert not feed.offer("cam", _frame(20), "bgr", 100.5)  # within the spread: not even copied
    assert feed.offer("cam", _frame(30)[:, :, ::-1], "rgb", 101.0)
    wait_until(lambda: feed.done, 10)
    kept = sorted((tmp_path / "calibration" / "m").glob("*.jpg"))
    assert [p.name for p in kept] == ["cam-0000.jpg", "cam-0001.jpg"]
    first, second = (cv2.imread(str(p)) for p in kept)
    assert abs(int(first[0, 0, 0]) - 10) <= 3  # the frame as submitted, not the zeroed slot
    assert abs(int(second[0, 0, 0]) - 30) <= 3 and second[0, 60, 2] > 180 and second[0, 60, 0] < 30  # RGB -> BGR
    assert not feed.offer("cam", _frame(40), "bgr", 200.0)  # done: nothing more is copied
    feed.stop()


class _SlowCollector(CalibrationCollector):
    """Holds the worker inside offer until released: a disk that stalls."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.release = threading.Event()

    def offer(self, camera_id: str, frame_bgr: np.ndarray, t: float) -> bool:
        self.release.wait(10)
        return super().offer(camera_id, frame_bgr, t)


def test_a_full_queue_drops_the_frame_and_never_blocks_submit(tmp_path: Path) -> None:
    collector = _SlowCollector(tmp_path, "m", count=8, spread_s=0.0)
    feed = CalibrationFeed(collector, "fp32", queue_size=1)
    assert feed.offer("a", _frame(1), "bgr", 1.0)  # taken by the worker, which stalls
    wait_until(lambda: feed._queue.empty(), 5)
    assert feed.offer("b", _frame(2), "bgr", 1.0)  # queued
    start = time.perf_counter()
    assert not feed.offer("c", _frame(3), "bgr", 1.0)  # full: dropped
    assert time.perf_counter() - start < 2.0 and feed.dropped == 1  # a waiting put would sit until release
    collector.release.set()
    wait_until(lambda: collector.kept == 2, 10)
    feed.stop()


def test_no_feed_without_device_frames_or_once_the_set_is_complete(tmp_path: Path) -> None:
    shipped = REPO / "engines"
    assert start_calibration_feed(shipped, "yolov3-tiny", tmp_path, 1, "fp32") is None  # device_frames: 0
    engines = tmp_path / "engines"
    engines.mkdir()
    text = (shipped / "yolov3-tiny.yaml").read_text().replace("  device_frames: 0 ", "  device_frames: 1 #")
    (engines / "yolov3-tiny.yaml").write_text(text)
    feed = start_calibration_feed(engines, "yolov3-tiny", tmp_path / "state", 1, "fp32")
    assert feed is not None and not feed.done
    assert feed.offer("cam", _frame(5), "bgr", 0.0)
    wait_until(lambda: feed.done, 10)
    feed.stop()
    assert start_calibration_feed(engines, "yolov3-tiny", tmp_path / "state", 1, "fp32") is None  # resumed: full
