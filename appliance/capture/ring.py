"""Mapping a camera's ring: the one :class:`RingWriter` (the capture process) and any number of readers.

* :class:`RingWriter` fills a free slot and publishes it; it never touches a slot that a reader has
  leased or the slot holding the latest frame.
* :class:`RingReader` (inference) leases the latest frame as a zero-copy numpy view, :class:`FrameLease`.

A torn frame is impossible: the writer holds an exclusive byte-range lock on a slot while it fills it,
and a reader holds a shared lock on it for as long as it holds the lease, so the two never overlap.
The per-slot seqlock word (odd while filling) additionally marks a slot whose writer died mid-frame.
Writer and reader stay in one module because that protocol is only checkable with both sides in view.
The file itself (creation, space, removal) is :mod:`appliance.capture.ringfile`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from appliance.capture import locks
from appliance.capture.errors import RingBusyError, RingError, RingNotFoundError
from appliance.capture.health import CaptureHealth
from appliance.capture.layout import PIXEL_FORMAT_NAMES, PIXEL_FORMATS, SLOT_LOCK_BASE, WRITER_LOCK, CaptureState
from appliance.capture.ringfile import get_text, map_ring, read_geometry, set_text

log = logging.getLogger(__name__)


class _Mapped:
    """An open, validated mapping of an existing ring file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RingNotFoundError(f"no capture ring at {self.path}; is the camera's capture started?") from None
        try:
            self.geometry, size = read_geometry(self.path, fd)
            self._mm, self._header, self._slots = map_ring(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.camera_id = get_text(self._header, "camera_id")

    def _frame_offset(self, slot: int) -> int:
        return self.geometry.header_bytes + slot * self.geometry.slot_stride

    def _unmap(self) -> None:
        if self._fd < 0:
            return
        del self._header, self._slots
        try:
            self._mm.close()
        except BufferError:
            # A caller still holds a frame view; the mapping goes when the last view is collected.
            log.warning("ring %s: frame arrays are still referenced; unmapping when they are dropped", self.path)
        os.close(self._fd)
        self._fd = -1

    def health(self, clock: Callable[[], float] = time.monotonic) -> CaptureHealth:
        return CaptureHealth.from_header(self._header, self.camera_id, locks.is_locked(self._fd, WRITER_LOCK), clock())


# --------------------------------------------------------------------------------------------- writer


@dataclass
class SlotClaim:
    """A slot the writer holds exclusively; fill :attr:`array`, then publish or abandon it."""

    slot: int
    array: np.ndarray


class RingWriter(_Mapped):
    """The single writer of a ring (the capture process). Not thread-safe: one thread writes."""

    def __init__(self, path: Path | str, *, pid: int | None = None) -> None:
        super().__init__(path)
        if not locks.try_lock(self._fd, WRITER_LOCK, locks.EXCLUSIVE):
            pid_now = int(self._header["writer_pid"])
            self._unmap()
            raise RingBusyError(f"camera {self.camera_id!r} already has a live capture process (pid {pid_now})")
        g = self.geometry
        self._views: list[np.ndarray] = [
            np.ndarray((g.height, g.width, g.channels), np.uint8, buffer=self._mm, offset=self._frame_offset(k))
            for k in range(g.slots)
        ]
        for k in range(g.slots):
            meta = self._slots[k]
            if int(meta["lock_seq"]) % 2:  # the previous writer died filling it: the pixels are torn
                meta["seq"] = 0
                meta["lock_seq"] = int(meta["lock_seq"]) + 1
                log.info("ring %s: slot %d was left half-written by a dead writer; emptied", self.path, k)
        self._header["writer_pid"] = os.getpid() if pid is None else pid
        self._header["generation"] = int(self._header["generation"]) + 1

    @property
    def generation(self) -> int:
        return int(self._header["generation"])

    def claim(self) -> SlotClaim | None:
        """Lock the oldest slot that is neither the latest nor leased; None when every such slot is leased."""
        latest = int(self._header["latest_slot"])
        order = sorted((int(self._slots[k]["seq"]), k) for k in range(self.geometry.slots) if k != latest)
        for _, k in order:
            if locks.try_lock(self._fd, SLOT_LOCK_BASE + k, locks.EXCLUSIVE):
                meta = self._slots[k]
                if int(meta["seq"]) and not int(meta["consumed"]):
                    self._header["drops"] = int(self._header["drops"]) + 1
                meta["lock_seq"] = int(meta["lock_seq"]) + 1  # odd: being filled
                return SlotClaim(k, self._views[k])
        self._header["ring_full"] = int(self._header["ring_full"]) + 1
        self._header["drops"] = int(self._header["drops"]) + 1
        return None

    def publish(self, claim: SlotClaim, t_mono: float, t_utc: float) -> int:
        """Make the filled slot the latest frame; returns its sequence number."""
        seq = int(self._header["latest_seq"]) + 1
        meta = self._slots[claim.slot]
        meta["seq"] = seq
        meta["t_mono"] = t_mono
        meta["t_utc"] = t_utc
        meta["width"] = self.geometry.width
        meta["height"] = self.geometry.height
        meta["pixel_format"] = PIXEL_FORMATS[self.geometry.pixel_format]
        meta["consumed"] = 0
        meta["lock_seq"] = int(meta["lock_seq"]) + 1  # even: complete
        locks.unlock(self._fd, SLOT_LOCK_BASE + claim.slot)
        h = self._header
        h["latest_slot"] = claim.slot
        h["latest_seq"] = seq
        h["frames"] = int(h["frames"]) + 1
        h["last_frame_mono"] = t_mono
        h["last_frame_utc"] = t_utc
        return seq

    def abandon(self, claim: SlotClaim) -> None:
        """Give a claimed slot back unpublished (the read failed); its old pixels are gone, so it is emptied."""
        meta = self._slots[claim.slot]
        meta["seq"] = 0
        meta["consumed"] = 0
        meta["lock_seq"] = int(meta["lock_seq"]) + 1
        locks.unlock(self._fd, SLOT_LOCK_BASE + claim.slot)

    def set_state(self, state: CaptureState, now: float, error: str | None = None) -> None:
        if error is not None:
            set_text(self._header, "last_error", error)
        if int(self._header["state"]) != state:
            self._header["state"] = state
            self._header["state_since_mono"] = now

    @property
    def state(self) -> CaptureState:
        return CaptureState(int(self._header["state"]))

    def count(self, field: str, n: int = 1) -> None:
        """Add to one of the health counters (decode_errors, reconnects, stalls...)."""
        self._header[field] = int(self._header[field]) + n

    def set_fps(self, fps: float) -> None:
        self._header["fps"] = fps

    def close(self, state: CaptureState = CaptureState.STOPPED, now: float | None = None) -> None:
        """Record the final state and release the writer role (the ring itself stays)."""
        if self._fd < 0:
            return
        self.set_state(state, time.monotonic() if now is None else now)
        self._header["fps"] = 0.0
        self._views = []
        self._unmap()  # closing the fd drops the writer lock


# --------------------------------------------------------------------------------------------- reader


@dataclass(frozen=True)
class FrameMeta:
    camera_id: str
    seq: int
    t_mono: float  # time.monotonic() of the capture process at capture
    t_utc: float  # time.time() at capture
    width: int
    height: int
    pixel_format: str  # "bgr" or "rgb"


class FrameLease:
    """A frame held in place in its slot: the writer will not touch the slot until :meth:`release`.

    ``array`` is a read-only H x W x 3 uint8 view on the shared memory itself (owner: the
    :class:`RingReader` that handed out the lease); it must not be used after release. ``address`` and
    ``nbytes`` describe the same memory for APIs that take a pointer (Triton's AppendInputData).
    """

    __slots__ = ("array", "meta", "_reader", "_slot", "_released")

    def __init__(self, reader: "RingReader", slot: int, array: np.ndarray, meta: FrameMeta) -> None:
        self.array, self.meta = array, meta
        self._reader, self._slot, self._released = reader, slot, False

    @property
    def address(self) -> int:
        return self.array.ctypes.data

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Let the writer reuse the slot. Idempotent and safe from any thread (Triton's release callback)."""
        self._reader._release(self)

    def __enter__(self) -> "FrameLease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FrameLease(camera={self.meta.camera_id!r}, seq={self.meta.seq}, released={self._released})"


class RingReader(_Mapped):
    """Leases frames of one camera's ring; any number of readers, in any processes.

    Holding L leases at once (across all readers) needs ``ring_slots >= L + 2``: one slot for the
    latest frame and one for the writer to fill. With fewer, the writer finds no free slot and drops
    new frames (counted in ``ring_full``) until a lease is released; it never overwrites a leased slot.
    """

    def __init__(self, path: Path | str) -> None:
        super().__init__(path)
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # slot -> leases of this reader on it (the OFD lock is per file)
        self.frames_skipped = 0  # frames this reader never saw because a newer one was taken

    @property
    def latest_seq(self) -> int:
        return int(self._header["latest_seq"])

    def acquire_latest(self, after_seq: int | None = None) -> FrameLease | None:
        """Lease the newest frame, or None if there is none newer than ``after_seq`` yet."""
        with self._lock:
            if self._fd < 0:
                raise RingError(f"reader of {self.path} is closed")
            for _ in range(8):
                if after_seq is not None and int(self._header["latest_seq"]) <= after_seq:
                    return None
                slot = int(self._header["latest_slot"])
                if slot < 0:
                    return None
                if slot not in self._held and not locks.try_lock(self._fd, SLOT_LOCK_BASE + slot, locks.SHARED):
                    continue  # the writer took that slot after publishing a newer one: look again
                meta = self._slots[slot]
                seq = int(meta["seq"])
                if int(meta["lock_seq"]) % 2 or seq == 0 or (after_seq is not None and seq <= after_seq):
                    if slot not in self._held:
                        locks.unlock(self._fd, SLOT_LOCK_BASE + slot)
                    continue
                meta["consumed"] = 1
                self._held[slot] = self._held.get(slot, 0) + 1
                return self._lease(slot, meta, seq, after_seq)
            return None

    def _lease(self, slot: int, meta: np.ndarray, seq: int, after_seq: int | None) -> FrameLease:
        g = self.geometry
        array: np.ndarray = np.ndarray((g.height, g.width, g.channels), np.uint8, buffer=self._mm,
                                       offset=self._frame_offset(slot))
        array.flags.writeable = False
        if after_seq is not None and seq > after_seq + 1:
            self.frames_skipped += seq - after_seq - 1
        info = FrameMeta(
            camera_id=self.camera_id,
            seq=seq,
            t_mono=float(meta["t_mono"]),
            t_utc=float(meta["t_utc"]),
            width=int(meta["width"]),
            height=int(meta["height"]),
            pixel_format=PIXEL_FORMAT_NAMES.get(int(meta["pixel_format"]), "?"),
        )
        return FrameLease(self, slot, array, info)

    def _release(self, lease: FrameLease) -> None:
        with self._lock:
            if lease._released:
                return
            lease._released = True
            left = self._held[lease._slot] - 1
            if left:
                self._held[lease._slot] = left
            else:
                del self._held[lease._slot]
                if self._fd >= 0:
                    locks.unlock(self._fd, SLOT_LOCK_BASE + lease._slot)

    @property
    def leases_held(self) -> int:
        with self._lock:
            return sum(self._held.values())

    def writer_alive(self) -> bool:
        return locks.is_locked(self._fd, WRITER_LOCK)

    def is_current(self) -> bool:
        """False once the ring file was removed or replaced (camera retired or re-created): open a new reader."""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(self._fd)
        return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)

    def close(self) -> None:
        """Unmap the ring. Every lease must be released first (their arrays point into the mapping)."""
        with self._lock:
            if self._held:
                raise RingError(
                    f"reader of {self.path} still holds {sum(self._held.values())} lease(s); release them before close"
                )
            self._unmap()

    def __enter__(self) -> "RingReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
