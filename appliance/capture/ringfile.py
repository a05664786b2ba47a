"""A camera ring's file in shared memory: its name, the space it needs, its creation and removal by the owner.

:class:`RingOwner` (the supervisor side) creates the file, checks /dev/shm space first, reclaims a leftover of
a crashed run, and removes the file when the camera is retired. The ring outlives capture process restarts,
so readers keep working while a dead capture process is replaced. The writer and readers that map the file
are in :mod:`appliance.capture.ring`; the byte layout is :mod:`appliance.capture.layout`.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import stat
import time
from pathlib import Path
from typing import AbstractSet, Callable

import numpy as np

from appliance.capture import locks
from appliance.capture.errors import RingBusyError, RingForeignError, RingFormatError, ShmSpaceError
from appliance.capture.layout import (
    MAGIC,
    OWNER_LOCK,
    PIXEL_FORMAT_NAMES,
    PIXEL_FORMATS,
    RING_HEADER,
    SLOT_META,
    VERSION,
    WRITER_LOCK,
    CaptureState,
    RingGeometry,
)

log = logging.getLogger(__name__)

RING_PREFIX = "appliance-cam-"
RING_SUFFIX = ".ring"


def ring_path(shm_root: Path | str, camera_id: str) -> Path:
    """Where the ring of ``camera_id`` lives under ``shm_root`` (usually /dev/shm)."""
    return Path(shm_root) / f"{RING_PREFIX}{camera_id}{RING_SUFFIX}"


def shm_free_bytes(root: Path | str, statvfs: Callable[[str], os.statvfs_result] = os.statvfs) -> int:
    """Bytes an unprivileged process may still allocate under ``root``."""
    st = statvfs(str(root))
    return st.f_bavail * st.f_frsize


def check_shm_space(root: Path | str, needed: int, what: str, statvfs: Callable = os.statvfs) -> None:
    """Raise :class:`ShmSpaceError` unless ``needed`` bytes are free under ``root``."""
    free = shm_free_bytes(root, statvfs)
    if needed > free:
        raise ShmSpaceError(Path(root), needed, free, what)


def map_ring(fd: int, size: int) -> tuple[mmap.mmap, np.ndarray, np.ndarray]:
    """Map ``size`` bytes of the ring file: the mapping, and views of its header and slot table into it."""
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    header: np.ndarray = np.ndarray((), RING_HEADER, buffer=mm, offset=0)
    count = int(header["slot_count"]) if bytes(header["magic"]) == MAGIC else 0
    slots: np.ndarray = np.ndarray((count,), SLOT_META, buffer=mm, offset=RING_HEADER.itemsize)
    return mm, header, slots


def read_geometry(path: Path, fd: int) -> tuple[RingGeometry, int]:
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


def get_text(header: np.ndarray, field: str) -> str:
    """A text field of the header (NUL-padded UTF-8)."""
    return bytes(header[field].item()).rstrip(b"\0").decode("utf-8", "replace")


def set_text(header: np.ndarray, field: str, text: str) -> None:
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

    Raises :class:`ShmSpaceError` (with the MiB needed and free) before allocating anything,
    :class:`RingBusyError` if a live process still owns that ring, and :class:`RingForeignError` if something
    other than this user's own private ring file is at ``path`` (it is left as it is).
    """
    path = Path(path)
    what = f"camera {camera_id!r} ring ({geometry.describe()})"
    for _ in range(3):
        fd = _create_or_open_own(path)
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
            old, _ = read_geometry(path, fd)
        except RingFormatError as exc:
            old = None
            log.warning("replacing unusable leftover %s: %s", path, exc)
        if old == geometry:
            log.info("reclaiming leftover ring %s of a previous run (owner pid %s gone)", path,
                     _peek_pid(fd, "owner_pid"))
            break
        if old is not None:
            log.info("replacing leftover ring %s: it had %s, camera %r needs %s", path, old.describe(), camera_id,
                     geometry.describe())
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
                free = shm_free_bytes(path.parent, statvfs)
                raise ShmSpaceError(path.parent, geometry.total_bytes, free, what) from exc
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


def _create_or_open_own(path: Path) -> int:
    """A new ring file made exclusively, or else the existing one at ``path`` if it is provably ours."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return open_own_file(path, os.O_RDWR)


def open_own_file(path: Path, flags: int) -> int:
    """Open ``path`` only if it is a regular file (not a link) owned by this user that no one else may open.

    Raises :class:`RingForeignError` otherwise, or FileNotFoundError when nothing is there."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EACCES):
            raise RingForeignError(f"{path} is not this appliance's ring ({exc.strerror}); leaving it alone") from exc
        raise
    st = os.fstat(fd)
    problem = foreign_reason(st)
    if problem:
        os.close(fd)
        raise RingForeignError(f"{path} is not this appliance's ring ({problem}); leaving it alone")
    return fd


def foreign_reason(st: os.stat_result, kind: int = stat.S_IFREG) -> str:
    """Why a file with this status is not one of ours to use (wrong type, owner, or open to others); "" if it is."""
    if stat.S_IFMT(st.st_mode) != kind:
        return f"not a {'directory' if kind == stat.S_IFDIR else 'regular file'}"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):04o} lets other users in"
    return ""


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
    mm, header, _ = map_ring(fd, geometry.header_bytes)
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
        set_text(header, "camera_id", camera_id)
        header["magic"] = MAGIC  # last: a half-initialised file is never taken for a ring
    finally:
        del header
        mm.close()


def reclaim_stale_rings(ring_dir: Path | str, keep: AbstractSet[str] = frozenset()) -> list[Path]:
    """Delete ring files under ``ring_dir`` whose owner is dead, except those of cameras in ``keep``.

    Call once at supervisor start with the configured camera ids: rings of cameras removed from the
    config since a crash would otherwise leak. Rings of kept cameras are reclaimed by :func:`create_ring`.
    What is not provably one of our ring files (a link, a directory, another user's file, a file without a ring
    header) is logged and kept.
    """
    removed = []
    for path in sorted(Path(ring_dir).glob(f"{RING_PREFIX}*{RING_SUFFIX}")):
        camera_id = path.name[len(RING_PREFIX) : -len(RING_SUFFIX)]
        if camera_id in keep:
            continue
        try:
            fd = open_own_file(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        except RingForeignError as exc:
            log.warning("%s", exc)
            continue
        try:
            if _peek_pid(fd, "owner_pid") is None:  # no ring header: not provably ours
                log.warning("leaving %s alone: it has no capture ring header", path)
                continue
            if locks.try_lock(fd, OWNER_LOCK, locks.EXCLUSIVE):
                os.unlink(path)
                removed.append(path)
                log.info("removed leftover ring %s of a camera no longer configured", path)
        finally:
            os.close(fd)
    return removed
