"""A per-camera ring of frame slots in a shared-memory file, and its three roles.

* :class:`RingOwner` (the supervisor side) creates the file, checks /dev/shm space first, reclaims a
  leftover of a crashed run, and removes the file when the camera is retired. The ring outlives capture
  process restarts, so readers keep working while a dead capture process is replaced.
* :class:`RingWriter` (the capture process) fills a free slot and publishes it; it never touches a slot
  that a reader has leased or the slot holding the latest frame.
* :class:`RingReader` (inference) leases the latest frame as a zero-copy numpy view, :class:`FrameLease`.

A torn frame is impossible: the writer holds an exclusive byte-range lock on a slot while it fills it,
and a reader holds a shared lock on it for as long as it holds the lease, so the two never overlap.
The per-slot seqlock word (odd while filling) additionally marks a slot whose writer died mid-frame.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Callable

import numpy as np

from appliance.capture import locks
from appliance.capture.layout import (
    MAGIC,
    OWNER_LOCK,
    PIXEL_FORMAT_NAMES,
    PIXEL_FORMATS,
    RING_HEADER,
    SLOT_LOCK_BASE,
    SLOT_META,
    VERSION,
    WRITER_LOCK,
    CaptureState,
    RingGeometry,
)

log = logging.getLogger(__name__)

RING_PREFIX = "appliance-cam-"
RING_SUFFIX = ".ring"


class RingError(Exception):
    """Base of every ring error."""


class RingBusyError(RingError):
    """Another live process already owns (or writes) this ring."""


class RingFormatError(RingError):
    """The file is not a ring this code understands."""


class RingNotFoundError(RingError):
    """No ring file for that camera (its capture was never started, or it was retired)."""


class ShmSpaceError(RingError):
    """Not enough free space in the shared-memory filesystem; carries the numbers."""

    def __init__(self, root: Path, needed: int, free: int, what: str) -> None:
        self.root, self.needed, self.free = root, needed, free
        super().__init__(
            f"{what} needs {needed / 2**20:.1f} MiB in {root} but only {free / 2**20:.1f} MiB is free; "
            f"enlarge it (docker run --shm-size=..., or `mount -o remount,size=<bytes> {root}`) "
            f"or lower ring_slots / width / height"
        )


def ring_path(shm_root: Path | str, camera_id: str) -> Path:
    """Where the ring of ``camera_id`` lives under ``shm_root`` (usually /dev/shm)."""
    return Path(shm_root) / f"{RING_PREFIX}{camera_id}{RING_SUFFIX}"


def shm_free_bytes(root: Path | str, statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> int:
    st = statvfs(str(root))
    return st.f_bavail * st.f_frsize


def check_shm_space(root: Path | str, needed: int, what: str, statvfs: Callable = os.statvfs) -> None:
    """Raise :class:`ShmSpaceError` unless ``needed`` bytes are free under ``root``."""
    free = shm_free_bytes(root, statvfs)
    if needed > free:
        raise ShmSpaceError(Path(root), needed, free, what)


def _map(fd: int, size: int) -> tuple[mmap.mmap, np.ndarray, np.ndarray]:
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    header = np.ndarray((), RING_HEADER, buffer=mm, offset=0)
    count = int(header["slot_count"]) if bytes(header["magic"]) == MAGIC else 0
    slots = np.ndarray((count,), SLOT_META, buffer=mm, offset=RING_HEADER.itemsize)
    return mm, header, slots


def _read_geometry(path: Path, fd: int) -> tuple[RingGeometry, int]:
    """Validate the header of an existing ring file; return its geometry and file size."""
    size = os.fstat(fd).st_size
    if size < RING_HEADER.itemsize:
        raise RingFormatError(f"{path} is {size} bytes, too small to be a capture ring")
    raw = os.pread(fd, RING_HEADER.itemsize, 0)
    header = np.frombuffer(raw, RING_HEADER)[0]
    if bytes(header["magic"]) != MAGIC or int(header["version"]) != VERSION:
        raise RingFormatError(f"{path} is not a version-{VERSION} capture ring (magic {bytes(header['magic'])!r})")
    try:
        geometry = RingGeometry(
            width=int(header["width"]),
            height=int(header["height"]),
            slots=int(header["slot_count"]),
            pixel_format=PIXEL_FORMAT_NAMES.get(int(header["pixel_format"]), "?"),
            channels=int(header["channels"]),
        )
    except ValueError as exc:
        raise RingFormatError(f"{path} has a corrupt header: {exc}") from exc
    if geometry.total_bytes != size or geometry.slot_stride != int(header["slot_stride"]):
        raise RingFormatError(f"{path} is {size} bytes but its header describes {geometry.describe()}")
    return geometry, size


def _get_text(header: np.ndarray, field: str) -> str:
    return bytes(header[field].item()).rstrip(b"\0").decode("utf-8", "replace")


def _set_text(header: np.ndarray, field: str, text: str) -> None:
    assert RING_HEADER.fields is not None  # a structured dtype
    limit = RING_HEADER.fields[field][0].itemsize
    header[field] = text.encode("utf-8", "replace")[:limit]


# ---------------------------------------------------------------------------------------------- owner


class RingOwner:
    """Creates and owns one camera's ring file; see :func:`create_ring`."""

    def __init__(self, path: Path, fd: int, geometry: RingGeometry) -> None:
        self.path, self.geometry, self._fd = path, geometry, fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self, remove: bool = True) -> None:
        """Give up ownership; with ``remove`` (the default) delete the file so nothing leaks in /dev/shm."""
        if self._fd < 0:
            return
        if remove:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> "RingOwner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_ring(
    path: Path | str,
    geometry: RingGeometry,
    camera_id: str,
    *,
    statvfs: Callable = os.statvfs,
) -> RingOwner:
    """Create the ring at ``path``, or reclaim a leftover whose owner died; return its owner handle.

    Raises :class:`ShmSpaceError` (with the MiB needed and free) before allocating anything, and
    :class:`RingBusyError` if a live process still owns that ring.
    """
    path = Path(path)
    what = f"camera {camera_id!r} ring ({geometry.describe()})"
    for _ in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not locks.try_lock(fd, OWNER_LOCK, locks.EXCLUSIVE):
            pid = _peek_pid(fd, "owner_pid")
            os.close(fd)
            raise RingBusyError(f"{path} is owned by live process {pid}; is another appliance running?")
        if os.fstat(fd).st_nlink == 0:  # unlinked by a racing reclaim between open and lock: start over
            os.close(fd)
            continue
        if locks.is_locked(fd, WRITER_LOCK):
            pid = _peek_pid(fd, "writer_pid")
            os.close(fd)
            raise RingBusyError(
                f"{path}: capture process {pid} of a previous run is still writing it; stop that process first"
            )
        size = os.fstat(fd).st_size
        if size == 0:
            break
        try:
            old, _ = _read_geometry(path, fd)
        except RingFormatError as exc:
            old = None
            log.warning("replacing unusable leftover %s: %s", path, exc)
        if old == geometry:
            log.info("reclaiming leftover ring %s of a previous run (owner pid %s gone)", path, _peek_pid(fd, "owner_pid"))
            break
        if old is not None:
            log.info("replacing leftover ring %s: it had %s, camera %r needs %s", path, old.describe(), camera_id, geometry.describe())
        os.unlink(path)
        os.close(fd)
    else:  # pragma: no cover - needs three racing owners in a row
        raise RingBusyError(f"could not take ownership of {path}: it keeps being replaced")

    try:
        allocated = os.fstat(fd).st_blocks * 512
        check_shm_space(path.parent, max(0, geometry.total_bytes - allocated), what, statvfs)
        try:
            # Reserve every page now: on tmpfs a sparse file would SIGBUS the writer when /dev/shm fills up.
            os.posix_fallocate(fd, 0, geometry.total_bytes)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise ShmSpaceError(path.parent, geometry.total_bytes, shm_free_bytes(path.parent, statvfs), what) from exc
            raise
        os.ftruncate(fd, geometry.total_bytes)
        _initialise(fd, geometry, camera_id)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        raise
    return RingOwner(path, fd, geometry)


def _peek_pid(fd: int, field: str) -> int | None:
    try:
        raw = os.pread(fd, RING_HEADER.itemsize, 0)
        if len(raw) == RING_HEADER.itemsize:
            header = np.frombuffer(raw, RING_HEADER)[0]
            if bytes(header["magic"]) == MAGIC:
                return int(header[field])
    except OSError:
        pass
    return None


def _initialise(fd: int, geometry: RingGeometry, camera_id: str) -> None:
    mm, header, _ = _map(fd, geometry.header_bytes)
    try:
        mm[: geometry.header_bytes] = bytes(geometry.header_bytes)
        header["version"] = VERSION
        header["slot_count"] = geometry.slots
        header["width"] = geometry.width
        header["height"] = geometry.height
        header["channels"] = geometry.channels
        header["pixel_format"] = PIXEL_FORMATS[geometry.pixel_format]
        header["slot_stride"] = geometry.slot_stride
        header["header_bytes"] = geometry.header_bytes
        header["owner_pid"] = os.getpid()
        header["latest_slot"] = -1
        header["state"] = CaptureState.IDLE
        header["state_since_mono"] = time.monotonic()
        _set_text(header, "camera_id", camera_id)
        header["magic"] = MAGIC  # last: a half-initialised file is never taken for a ring
    finally:
        del header
        mm.close()


def reclaim_stale_rings(shm_root: Path | str, keep: AbstractSet[str] = frozenset()) -> list[Path]:
    """Delete ring files under ``shm_root`` whose owner is dead, except those of cameras in ``keep``.

    Call once at supervisor start with the configured camera ids: rings of cameras removed from the
    config since a crash would otherwise leak. Rings of kept cameras are reclaimed by :func:`create_ring`.
    """
    removed = []
    for path in sorted(Path(shm_root).glob(f"{RING_PREFIX}*{RING_SUFFIX}")):
        camera_id = path.name[len(RING_PREFIX) : -len(RING_SUFFIX)]
        if camera_id in keep:
            continue
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            if locks.try_lock(fd, OWNER_LOCK, locks.EXCLUSIVE):
                os.unlink(path)
                removed.append(path)
                log.info("removed leftover ring %s of a camera no longer configured", path)
        finally:
            os.close(fd)
    return removed


# --------------------------------------------------------------------------------------------- shared


class _Mapped:
    """An open, validated mapping of an existing ring file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RingNotFoundError(f"no capture ring at {self.path}; is the camera's capture started?") from None
        try:
            self.geometry, size = _read_geometry(self.path, fd)
            self._mm, self._header, self._slots = _map(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.camera_id = _get_text(self._header, "camera_id")

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

    def health(self, clock: Callable[[], float] = time.monotonic) -> "CaptureHealth":
        return CaptureHealth.from_header(self._header, self.camera_id, locks.is_locked(self._fd, WRITER_LOCK), clock())


@dataclass(frozen=True)
class CaptureHealth:
    """A snapshot of one camera's state and counters, read from its ring header."""

    camera_id: str
    state: CaptureState
    state_age_s: float
    writer_alive: bool
    writer_pid: int
    generation: int
    latest_seq: int
    frames: int
    drops: int
    ring_full: int
    decode_errors: int
    reconnects: int
    stalls: int
    fps: float
    last_frame_age_s: float | None
    last_error: str

    @classmethod
    def from_header(cls, h: np.ndarray, camera_id: str, writer_alive: bool, now: float) -> "CaptureHealth":
        last = float(h["last_frame_mono"])
        return cls(
            camera_id=camera_id,
            state=CaptureState(int(h["state"])),
            state_age_s=max(0.0, now - float(h["state_since_mono"])),
            writer_alive=writer_alive,
            writer_pid=int(h["writer_pid"]),
            generation=int(h["generation"]),
            latest_seq=int(h["latest_seq"]),
            frames=int(h["frames"]),
            drops=int(h["drops"]),
            ring_full=int(h["ring_full"]),
            decode_errors=int(h["decode_errors"]),
            reconnects=int(h["reconnects"]),
            stalls=int(h["stalls"]),
            fps=float(h["fps"]),
            last_frame_age_s=max(0.0, now - last) if last > 0 else None,
            last_error=_get_text(h, "last_error"),
        )


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
        self._views = [
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
            _set_text(self._header, "last_error", error)
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
        array = np.ndarray((g.height, g.width, g.channels), np.uint8, buffer=self._mm, offset=self._frame_offset(slot))
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
