"""Frame scheduling: which camera's frame goes into Triton next.

Latest frame wins (skipped frames are counted, never queued), per-camera and total in-flight limits,
round-robin between cameras, and each camera's results handed on in submit order; while the served model is
being recovered, frames are dropped and counted. docs/supervisor.md, "Scheduling", has the rules.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    import numpy as np

    from appliance.capture.ring import FrameMeta

log = logging.getLogger(__name__)


class Lease(Protocol):
    """A frame held in shared memory until ``release()`` (appliance.capture.ring.FrameLease)."""

    @property
    def meta(self) -> FrameMeta: ...
    @property
    def array(self) -> np.ndarray: ...  # the pixels, in place in the ring (the submitter hands them to Triton)
    def release(self) -> None: ...


class FrameReader(Protocol):
    def acquire_latest(self, after_seq: int | None = None) -> Lease | None: ...


# submit(camera_id, lease) -> Future; the submitter releases the lease when Triton no longer needs its memory.
Submit = Callable[[str, Lease], "Future[Any]"]
# on_result(camera_id, lease meta, future) — called from Triton's completion thread; keep it short.
OnResult = Callable[[str, Any, "Future[Any]"], None]
# gate() -> None to submit, or why frames are dropped now; asked once per frame, so it must be cheap.
Gate = Callable[[], "str | None"]
# on_drop(camera_id, reason) — a frame was dropped because of the gate.
OnDrop = Callable[[str, str], None]


class Wakeup(Protocol):
    """What the idle loop sleeps on (appliance.capture.doorbell.Doorbell): rung by capture processes after each
    frame and by this scheduler when a request completes, so nothing is polled while there is nothing to do."""

    def wait(self, timeout: float) -> bool: ...
    def ring(self) -> None: ...


@dataclass
class CameraSlot:
    camera_id: str
    reader: FrameReader
    min_interval_s: float
    last_seq: int | None = None
    last_capture: float | None = None  # capture time (camera clock) of the last frame submitted
    too_early_seq: int = 0  # newest frame skipped by the rate cap: do not lease it again
    inflight: int = 0
    submitted: int = 0
    skipped: int = 0  # frames captured but never inferred (latest-wins)
    dropped: int = 0  # frames dropped while the gate was closed (the pipeline was recovering)
    errors: int = 0
    stats_lock: threading.Lock = field(default_factory=threading.Lock)
    # submitted, not yet handed on, oldest first; order_lock lets one thread at a time hand results on
    pending: deque = field(default_factory=deque)
    order_lock: threading.Lock = field(default_factory=threading.Lock)


class Scheduler:
    """Runs the scheduling loop on its own thread; ``stop()`` drains in-flight requests within a deadline."""

    def __init__(self, submit: Submit, on_result: OnResult, *, max_inflight: int = 8, per_camera_inflight: int = 2,
                 idle_wait_s: float = 0.001, clock: Callable[[], float] = time.monotonic,
                 gate: Gate | None = None, on_drop: OnDrop | None = None, wakeup: Wakeup | None = None) -> None:
        if max_inflight < 1 or per_camera_inflight < 1:
            raise ValueError("max_inflight and per_camera_inflight must be at least 1")
        self._submit = submit
        self._on_result = on_result
        self._max_inflight = max_inflight
        self._per_camera_inflight = per_camera_inflight
        self._idle_wait_s = idle_wait_s
        self._clock = clock
        self._gate = gate
        self._on_drop = on_drop
        self._wakeup = wakeup
        self._cameras: list[CameraSlot] = []  # replaced, never changed in place: a pass reads its own list
        self._pass = threading.Lock()  # held for a whole pass: a camera removed is in no pass once it is taken
        self._next = 0
        self._inflight = 0
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_progress = clock()  # the watchdog is fed only while this moves

    def add_camera(self, camera_id: str, reader: FrameReader, target_fps: float | None) -> CameraSlot:
        slot = CameraSlot(camera_id, reader, 1.0 / target_fps if target_fps else 0.0)
        with self._cond:
            self._cameras = [*self._cameras, slot]
        return slot

    def remove_camera(self, camera_id: str, drain_timeout_s: float) -> bool:
        """No more frames of the camera; its frames in flight finish and are handed on. True when they did within
        the deadline (its ring can then be closed with no lease on it)."""
        with self._pass, self._cond:
            slot = next((s for s in self._cameras if s.camera_id == camera_id), None)
            self._cameras = [s for s in self._cameras if s is not slot]
            self._next = 0
        if slot is None:
            return True
        deadline = self._clock() + drain_timeout_s
        with self._cond:
            while slot.inflight > 0 and self._clock() < deadline:
                self._cond.wait(max(0.0, min(deadline - self._clock(), 0.1)))
            return slot.inflight == 0

    def cameras(self) -> list[CameraSlot]:
        return list(self._cameras)

    @property
    def inflight(self) -> int:
        return self._inflight

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("scheduler already started")
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._thread.start()

    def step(self) -> int:
        """One pass over the cameras; returns how many frames were submitted (the loop calls this)."""
        with self._pass:
            return self._pass_over(self._cameras)

    def _pass_over(self, cameras: list[CameraSlot]) -> int:
        submitted = 0
        n = len(cameras)
        start = self._next % n if n else 0
        for i in range(n):
            with self._cond:
                if self._inflight >= self._max_inflight or self._stopping.is_set():
                    break
            slot = cameras[(start + i) % n]
            try:
                ok = self._try_submit(slot)
            except Exception:  # one camera's broken ring must not stop the others
                slot.errors += 1
                if slot.errors == 1 or slot.errors % 1000 == 0:
                    log.exception("camera %s: reading its frame failed (%d times so far)", slot.camera_id,
                                  slot.errors, extra={"camera": slot.camera_id, "stage": "schedule"})
                continue
            if ok:
                submitted += 1
                self._next = (start + i + 1) % n
        return submitted

    def _try_submit(self, slot: CameraSlot) -> bool:
        if slot.inflight >= self._per_camera_inflight:
            return False
        lease = slot.reader.acquire_latest(max(slot.last_seq or 0, slot.too_early_seq) or None)
        if lease is None:
            return False
        reason = self._gate() if self._gate is not None else None
        if reason is not None:
            self._drop(slot, lease, reason)
            return False
        # The rate cap compares the camera's own capture times, not this loop's: a camera already paced at its
        # target rate is never held back by the loop's phase (which added up to a frame period of latency);
        # faster frames are skipped (latest wins), with 10 % slack for capture jitter.
        if slot.min_interval_s:
            if slot.last_capture is not None and lease.meta.t_mono - slot.last_capture < 0.9 * slot.min_interval_s:
                slot.too_early_seq = lease.meta.seq
                lease.release()
                return False
            slot.last_capture = lease.meta.t_mono
        seq = lease.meta.seq
        if slot.last_seq is not None and seq > slot.last_seq + 1:
            slot.skipped += seq - slot.last_seq - 1
        slot.last_seq = seq
        meta = lease.meta
        with self._cond:
            self._inflight += 1
            slot.inflight += 1
        try:
            future = self._submit(slot.camera_id, lease)
        except Exception:
            log.exception("camera %s: could not submit frame %d to Triton", slot.camera_id, seq)
            lease.release()
            self._finish(slot)
            slot.errors += 1
            return False
        slot.submitted += 1
        with slot.order_lock:
            slot.pending.append((meta, future))
        future.add_done_callback(functools.partial(self._completed, slot))
        return True

    def _completed(self, slot: CameraSlot, future: "Future[Any]") -> None:
        # The request's in-flight place is freed at once, even while its result waits for an earlier frame's:
        # the camera keeps feeding the free detector instance.
        self._hand_on_in_order(slot)
        if future.cancelled() or future.exception() is not None:
            slot.errors += 1
        else:
            self.last_progress = self._clock()
        self._finish(slot)

    def _hand_on_in_order(self, slot: CameraSlot) -> None:
        """Hand on every finished result at the head of the camera's queue; a later frame finished first waits
        for the earlier one (with two detector instances, frame 2 can finish before frame 1). Called before
        ``_finish``, so when nothing is in flight every result has been handed on (``stop`` relies on it)."""
        with slot.order_lock:
            while slot.pending and slot.pending[0][1].done():
                self._hand_on(slot, *slot.pending.popleft())

    def _hand_on(self, slot: CameraSlot, meta: Any, future: "Future[Any]") -> None:
        try:
            self._on_result(slot.camera_id, meta, future)
        except Exception:
            log.exception("camera %s: handling the result of frame %s failed", slot.camera_id, meta.seq)

    def _drop(self, slot: CameraSlot, lease: Lease, reason: str) -> None:
        seq = lease.meta.seq
        if slot.last_seq is not None and seq > slot.last_seq + 1:
            slot.skipped += seq - slot.last_seq - 1
        slot.last_seq = seq
        lease.release()
        slot.dropped += 1
        if self._on_drop is not None:
            self._on_drop(slot.camera_id, reason)

    def _finish(self, slot: CameraSlot) -> None:
        with self._cond:
            self._inflight -= 1
            slot.inflight -= 1
            self._cond.notify_all()
        if self._wakeup is not None:
            self._wakeup.ring()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                submitted = self.step()
            except Exception:  # one bad frame or reader must not stop inference for every camera
                log.exception("scheduler: a scheduling pass failed; continuing")
                submitted = 0
                self._stopping.wait(0.1)
            if submitted == 0:
                if self._wakeup is not None:  # woken by a new frame or a completion; the timeout is a backstop
                    self._wakeup.wait(self._idle_wait_s)
                    continue
                with self._cond:
                    # Woken early when a request completes (a slot frees up); else poll the rings again soon.
                    self._cond.wait(self._idle_wait_s)

    def stop(self, drain_timeout_s: float = 10.0) -> bool:
        """Stop submitting, wait for in-flight requests; True when all finished within the deadline."""
        self._stopping.set()
        if self._wakeup is not None:
            self._wakeup.ring()
        if self._thread is not None:
            self._thread.join(timeout=5)
        deadline = self._clock() + drain_timeout_s
        with self._cond:
            while self._inflight > 0 and self._clock() < deadline:
                self._cond.wait(max(0.0, min(deadline - self._clock(), 0.1)))
            still_in_flight = self._inflight
        if not still_in_flight:
            return True
        log.warning("stop: %d inference requests still in flight after %.1f s", still_in_flight, drain_timeout_s)
        for slot in self._cameras:  # out of order rather than lost: nothing will come before them now
            self._hand_on_finished(slot)
        return False

    def _hand_on_finished(self, slot: CameraSlot) -> None:
        with slot.order_lock:
            waiting = [(meta, future) for meta, future in slot.pending if not future.done()]
            finished = [(meta, future) for meta, future in slot.pending if future.done()]
            slot.pending = deque(waiting)
            if finished and waiting:
                log.warning("camera %s: publishing %d finished frame(s) ahead of frame %s, which never finished",
                            slot.camera_id, len(finished), waiting[0][0].seq)
            for meta, future in finished:
                self._hand_on(slot, meta, future)
