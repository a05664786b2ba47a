"""Open-file-description byte-range locks (Linux ``F_OFD_SETLK``).

OFD locks belong to an open file, not to a process: closing some other descriptor of the same file does
not drop them (the POSIX ``lockf`` trap), two readers in one process do not merge their locks, and the
kernel drops them when the holder dies - so a crashed reader never pins a slot and a crashed writer never
blocks its successor. Each lock call is a syscall, which is also the memory barrier the ring relies on.
"""

from __future__ import annotations

import errno
import fcntl
import struct

# struct flock: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid (+ padding).
_FLOCK = struct.Struct("@hhqqi4x")

SHARED = fcntl.F_RDLCK
EXCLUSIVE = fcntl.F_WRLCK


def try_lock(fd: int, offset: int, kind: int) -> bool:
    """Take a lock on one byte without waiting; False when another open file holds a conflicting lock."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, 0, offset, 1, 0))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def unlock(fd: int, offset: int) -> None:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_UNLCK, 0, offset, 1, 0))


def is_locked(fd: int, offset: int, kind: int = EXCLUSIVE) -> bool:
    """Whether some other open file holds a lock on that byte that conflicts with ``kind``."""
    result = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(kind, 0, offset, 1, 0))
    return _FLOCK.unpack(result)[0] != fcntl.F_UNLCK
