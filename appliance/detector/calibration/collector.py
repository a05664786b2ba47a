"""First-boot INT8 calibration frames from the device's own cameras, collected while serving.

When the served model's engine profile asks for them (``calibration.device_frames: N > 0``), the frame path
hands each submitted frame here. On the submit thread this costs a clock comparison, and, at most once per
camera every ``calibration.device_spread_s`` seconds, one copy of the frame into a small queue (a full queue
drops the frame; submit never waits). One worker thread converts it to BGR and offers it to
:class:`appliance.detector.calibration.device.CalibrationCollector`, which decides whether it spreads the set and
writes the JPEG durably into ``<state>/calibration/<model>/``. Once N frames are kept the worker ends and says
so; the engine is built before the cameras run, so a first boot serves the engine built on the profile's shipped
calibration frames, and the next engine build (the next start, or ``appliance build-engines``) calibrates on the
device's frames too (their hash is in an int8 engine's fingerprint: a new key, a rebuild).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from appliance.detector.buildprofile import load_profiles
from appliance.detector.calibration.device import CalibrationCollector

log = logging.getLogger(__name__)

_Item = tuple[str, np.ndarray, str, float]  # camera, pixels (a copy), pixel format, capture time (monotonic)


class CalibrationFeed:
    """Copies a frame now and then, off the hot path; ``collector`` keeps the ones that spread the set."""

    def __init__(self, collector: CalibrationCollector, precision: str, *, queue_size: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.collector = collector
        self._precision = precision
        self._clock = clock
        self._queue: queue.Queue[_Item | None] = queue.Queue(maxsize=queue_size)
        self._next_copy: dict[str, float] = {}  # per camera: not before this capture time
        self.dropped = 0  # queue full
        self._done = collector.done
        self._thread = threading.Thread(target=self._run, name="calibration-frames", daemon=True)
        if not self._done:
            self._thread.start()

    @property
    def done(self) -> bool:
        return self._done

    def offer(self, camera_id: str, pixels: np.ndarray, pixel_format: str, t: float) -> bool:
        """Called with each submitted frame (``pixels`` may be the ring's memory: copied here if taken). Returns
        whether a copy was queued."""
        if self._done or t < self._next_copy.get(camera_id, float("-inf")):
            return False
        self._next_copy[camera_id] = t + self.collector.spread_s
        try:
            self._queue.put_nowait((camera_id, np.array(pixels, copy=True), pixel_format, t))
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def _run(self) -> None:
        import cv2

        while (item := self._queue.get()) is not None:
            camera_id, pixels, pixel_format, t = item
            try:
                bgr = pixels if pixel_format == "bgr" else cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR)
                if not self.collector.offer(camera_id, bgr, t):
                    continue
            except (OSError, ValueError) as exc:  # a full disk, a frame that does not encode: serving goes on
                log.warning("calibration frames: camera %s: %s", camera_id, exc)
                continue
            log.info("calibration frames: %d of %d kept (camera %s)", self.collector.kept, self.collector.count,
                     camera_id)
            if self.collector.done:
                self._done = True
                log.info("calibration frames: all %d of %s kept in %s; %s", self.collector.count,
                         self.collector.folder.name, self.collector.folder, self._next_build())
                return

    def _next_build(self) -> str:
        if self._precision == "int8":
            return ("the next engine build (the next start, or `appliance build-engines`) calibrates the int8 "
                    "engine on them")
        return (f"the engine is {self._precision}: they are used once the profile's precision is int8 "
                "(then the next start, or `appliance build-engines`, calibrates on them)")

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the frame being written; frames still queued are dropped (the next run collects more)."""
        self._done = True
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        if self._thread.is_alive():
            self._thread.join(timeout)


def start_calibration_feed(engines_dir: Path, model: str, state_dir: Path, cameras: int,
                           precision: str) -> CalibrationFeed | None:
    """The feed for ``model`` when its engine profile asks for device frames and the set is not complete; None
    otherwise. ``precision``: the engine now served (for the operator's log line)."""
    (profile,) = load_profiles(Path(engines_dir), [model])
    wanted = profile.calibration.device_frames
    if not wanted or cameras < 1:
        return None
    collector = CalibrationCollector(state_dir, model, count=wanted, spread_s=profile.calibration.device_spread_s,
                                     cameras=cameras)
    if collector.done:
        log.info("calibration frames: %d of %s's %d camera frames are kept in %s", collector.kept, model, wanted,
                 collector.folder)
        return None
    log.info("calibration frames: keeping %d camera frames for %s in %s (%d so far), one per camera every %gs at "
             "most; this start serves the engine built on the profile's shipped calibration frames",
             wanted, model, collector.folder, collector.kept, collector.spread_s)
    return CalibrationFeed(collector, precision)


