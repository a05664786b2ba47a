"""The per-camera capture state machine: connect, stream into the ring, detect stalls, back off, retry.

It runs in the capture process but is plain code: the ring writer, the source factory, clocks and randomness are
constructor arguments, so tests drive it directly. The states and their transitions: docs/capture.md, "Process,
states and counters"."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable

import numpy as np

from appliance.backoff import Backoff
from appliance.capture.config import CameraConfig
from appliance.capture.layout import CaptureState
from appliance.capture.ring import RingWriter
from appliance.capture.sources.base import DecodeError, FrameSource, SourceAbsent, SourceConfigError, SourceError

log = logging.getLogger(__name__)


class CaptureLoop:
    def __init__(
        self,
        camera: CameraConfig,
        writer: RingWriter,
        source_factory: Callable[[], FrameSource],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        on_hung: Callable[[str], None] | None = None,
        hung_after_s: float | None = None,
        watchdog_interval_s: float = 0.1,
        on_frame: Callable[[], None] | None = None,
        on_published: Callable[[np.ndarray, float], None] | None = None,
    ) -> None:
        self.camera, self.writer, self._factory = camera, writer, source_factory
        self._clock, self._wall = clock, wall
        self._backoff = Backoff(camera.backoff, rng)
        self._on_hung = on_hung
        self._on_frame = on_frame  # after each published frame: wakes the scheduler (capture.doorbell)
        self._on_published = on_published  # (frame, wall time) after each published frame: must not block
        # A read still blocked this long after the stall was declared cannot be broken from here.
        self._hung_after_s = hung_after_s if hung_after_s is not None else max(10.0, 2 * camera.stall_timeout_s)
        self._watchdog_interval_s = watchdog_interval_s
        self._lock = threading.Lock()
        self._source: FrameSource | None = None
        self._attempt = 0
        self._progress = 0.0  # clock() of the last frame or connect attempt
        self._stalled_at: float | None = None
        self._connecting = False
        self._done = threading.Event()
        self._hung_reported = False
        self._waiting_since: float | None = None  # clock() when the source was first found absent, until it opens

    @property
    def name(self) -> str:
        return f"camera {self.camera.id!r}"

    def _set_state(self, state: CaptureState, error: str | None = None, since: float | None = None) -> None:
        with self._lock:
            self.writer.set_state(state, self._clock() if since is None else since, error)
            if state != CaptureState.STREAMING:
                self.writer.set_fps(0.0)

    def run(self, stop: threading.Event) -> CaptureState:
        """Capture until ``stop`` is set (returns STOPPED) or the config can never work (returns FAILED)."""
        watchdog = threading.Thread(target=self._watch, name=f"stall-watchdog-{self.camera.id}", daemon=True)
        watchdog.start()
        try:
            return self._run(stop)
        finally:
            self._done.set()
            watchdog.join()

    def _run(self, stop: threading.Event) -> CaptureState:
        while not stop.is_set():
            with self._lock:
                if self._attempt:
                    self.writer.count("reconnects")
                self._attempt += 1
                self._stalled_at = None
                self._connecting = True
                self._progress = self._clock()
            if self._waiting_since is None:  # a waiting camera stays WAITING (and since when) while it looks again
                self._set_state(CaptureState.CONNECTING)
            source = self._factory()
            with self._lock:
                self._source = source
            try:
                log.info("%s: connecting to %s", self.name, source.describe())
                source.open()
                self._waiting_since = None
                with self._lock:
                    self._connecting = False
                    self._progress = self._clock()  # connected: the stall timer counts from here
                self._stream(source, stop)
                error = None
            except SourceConfigError as exc:
                log.error("%s: %s", self.name, exc)
                self._set_state(CaptureState.FAILED, str(exc))
                return CaptureState.FAILED
            except SourceAbsent as exc:
                error = str(exc)
                if self._waiting_since is None:
                    self._waiting_since = self._clock()
                    log.warning("%s: waiting: %s", self.name, error)
            except SourceError as exc:
                error = str(exc)
                self._waiting_since = None  # there but failing: an ordinary reconnect
            finally:
                with self._lock:
                    self._source = None
                source.close()
            if stop.is_set():
                break
            with self._lock:
                if self._stalled_at is not None:
                    error = f"no frame from {source.describe()} for {self.camera.stall_timeout_s:g}s ({error})"
            delay = self._backoff.next_delay()
            if self._waiting_since is not None:  # said once when it started waiting; each retry is routine
                log.debug("%s: still waiting; looking again in %.1fs", self.name, delay)
                self._set_state(CaptureState.WAITING, error, since=self._waiting_since)
            else:
                log.warning("%s: %s; reconnecting in %.1fs (attempt %d)", self.name, error, delay,
                            self._backoff.attempt)
                self._set_state(CaptureState.BACKOFF, error)
            stop.wait(delay)
        self._set_state(CaptureState.STOPPED)
        return CaptureState.STOPPED

    def _stream(self, source: FrameSource, stop: threading.Event) -> None:
        cam = self.camera
        rate = cam.fps or (source.native_fps if source.paced else None)
        interval = 1.0 / rate if rate else 0.0
        next_due = self._clock()
        scratch: np.ndarray | None = None
        streak = 0
        window_start, window_frames = self._clock(), 0
        while not stop.is_set():
            now = self._clock()
            skip = False
            if interval and source.paced:
                if next_due > now and stop.wait(next_due - now):
                    return
                next_due = max(next_due + interval, self._clock() - interval)  # no burst after a slow read
            elif interval:  # a live source faster than the target rate: read, but publish only on time
                skip = now < next_due
            claim = None if skip else self.writer.claim()
            if claim is None:
                if scratch is None:
                    scratch = np.empty((cam.frame_size[1], cam.frame_size[0], 3), np.uint8)
                target = scratch
            else:
                target = claim.array
            try:
                source.read_into(target)
            except DecodeError as exc:
                if claim is not None:
                    self.writer.abandon(claim)
                self.writer.count("decode_errors")
                streak += 1
                log.warning("%s: %s (%d in a row)", self.name, exc, streak)
                if streak >= cam.max_decode_errors:
                    raise SourceError(f"{streak} bad reads in a row, last: {exc}") from exc
                continue
            except BaseException:
                if claim is not None:
                    self.writer.abandon(claim)
                raise
            now = self._clock()
            with self._lock:
                if self._stalled_at is not None:  # the watchdog gave up on this connection already
                    if claim is not None:
                        self.writer.abandon(claim)
                    return
                self._progress = now
            streak = 0
            if claim is not None:
                wall = self._wall()
                self.writer.publish(claim, now, wall)
                if self._on_published is not None:
                    self._on_published(claim.array, wall)
                if self._on_frame is not None:
                    self._on_frame()
            if not skip and interval and not source.paced:
                next_due = max(next_due + interval, now - interval)
            if self.writer.state != CaptureState.STREAMING:
                log.info("%s: streaming", self.name)
                self._set_state(CaptureState.STREAMING)
                self._backoff.reset()
                window_start, window_frames = now, 0
            window_frames += not skip
            if now - window_start >= 1.0:
                self.writer.set_fps(window_frames / (now - window_start))
                window_start, window_frames = now, 0

    def _watch(self) -> None:
        """Stall watchdog: flag a connection that yields no frame in time, abort it, and report a hang."""
        while not self._done.wait(self._watchdog_interval_s):
            with self._lock:
                source, now = self._source, self._clock()
                if source is None:
                    continue
                if self._stalled_at is None:
                    allowed = self.camera.stall_timeout_s + (source.open_timeout_s if self._connecting else 0.0)
                    if now - self._progress <= allowed:
                        continue
                    self._stalled_at = now
                    self.writer.count("stalls")
                    message = f"no frame from {source.describe()} for {self.camera.stall_timeout_s:g}s"
                    self.writer.set_state(CaptureState.STALLED, now, message)
                    self.writer.set_fps(0.0)
                    log.warning("%s: stalled: %s; dropping the connection", self.name, message)
                    hung = None
                elif now - self._stalled_at > self._hung_after_s and not self._hung_reported:
                    self._hung_reported = True
                    hung = (
                        f"{source.describe()} is still blocked {now - self._stalled_at:.0f}s after the stall "
                        f"and cannot be interrupted; exiting so the supervisor restarts capture"
                    )
                    self.writer.set_state(CaptureState.STALLED, now, hung)
                else:
                    continue
            if hung is None:
                source.abort()
            else:
                log.error("%s: %s", self.name, hung)
                if self._on_hung is not None:
                    self._on_hung(hung)
