"""The appliance's private directory for its frame rings, made fresh under a shared-memory root (/dev/shm).

/dev/shm is writable by every local user, so rings never live there by a fixed name that someone could take
first: each run makes a directory with an unguessable name and mode 0700 (``appliance-rings-XXXXXXXX``) and holds
an flock on it for as long as it runs. A later start removes such directories of runs that died (ours, unlocked)
and leaves everything else where it is, saying so in the log.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import tempfile
from pathlib import Path

from appliance.capture.ringfile import RING_PREFIX, RING_SUFFIX, foreign_reason, reclaim_stale_rings

log = logging.getLogger(__name__)

DIR_PREFIX = "appliance-rings-"


class RingDirectory:
    """A run's own ring directory; ``close()`` removes it once the rings in it are gone."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    @classmethod
    def create(cls, shm_root: Path | str) -> "RingDirectory":
        """Reclaim directories of dead runs under ``shm_root``, then make and lock this run's own."""
        reclaim_stale_ring_dirs(shm_root)
        for _ in range(3):
            path = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=shm_root))  # mode 0700; never an existing name
            # Until it is locked, another instance's start-up cleanup may take it for a dead run's and remove it.
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held for life: later starts see this run is alive
            except BlockingIOError:
                os.close(fd)
                continue
            if os.fstat(fd).st_nlink == 0:  # removed between mkdtemp and the lock
                os.close(fd)
                continue
            log.info("frame rings are in %s", path)
            return cls(path, fd)
        raise OSError(errno.EAGAIN, f"could not make a ring directory in {shm_root}: each was removed at once")

    def close(self) -> None:
        """Remove the (by now empty) directory and drop the lock; what is still inside is left and logged."""
        if self._fd < 0:
            return
        try:
            os.rmdir(self.path)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.warning("could not remove the ring directory %s: %s", self.path, exc.strerror)
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> "RingDirectory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RESTREAM_SOCKET = "restream.sock"  # the RTSP server's packet socket (a passthrough restream), in the run's folder


def reclaim_stale_ring_dirs(shm_root: Path | str) -> list[Path]:
    """Remove ring directories of runs that died: ours (owner, mode 0700, not a link) and no longer locked.

    Returns the directories removed; anything else with the prefix is logged and left alone."""
    removed = []
    for path in sorted(Path(shm_root).glob(f"{DIR_PREFIX}*")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("leaving %s alone: not a ring directory of this appliance (%s)", path, exc.strerror)
            continue
        try:
            problem = foreign_reason(os.fstat(fd), stat.S_IFDIR)
            if problem:
                log.warning("leaving %s alone: not a ring directory of this appliance (%s)", path, problem)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run's directory
            if _empty_out(path):
                removed.append(path)
                log.info("removed the ring directory %s of a run that did not stop cleanly", path)
        finally:
            os.close(fd)
    return removed


def _empty_out(path: Path) -> bool:
    """Remove the dead run's rings in ``path`` and then ``path``; False (and a log line) if something stays."""
    reclaim_stale_rings(path)
    if (path / RESTREAM_SOCKET).is_socket():  # the dead run's RTSP server did not remove it
        (path / RESTREAM_SOCKET).unlink(missing_ok=True)
    try:
        os.rmdir(path)
    except OSError as exc:
        left = sorted(p.name for p in path.iterdir())
        log.warning("could not remove %s (%s): it still holds %s", path, exc.strerror, left)
        return False
    return True


def find_rings(shm_root: Path | str, camera_id: str) -> list[Path]:
    """Rings of ``camera_id`` that appliances running under ``shm_root`` hold now (for check-config's space sum)."""
    return sorted(Path(shm_root).glob(f"{DIR_PREFIX}*/{RING_PREFIX}{camera_id}{RING_SUFFIX}"))
