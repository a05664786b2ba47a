"""Stop a process at a moment it holds no robust process-shared mutex, so that killing it frees no lock.

A Python-backend stub killed while it holds a mutex it shares with the server's process makes the server's next
lock throw an exception Triton does not catch, and the whole process aborts. So: SIGSTOP, read every thread's
robust list, kill only while all are empty, else SIGCONT and look again. Where the lists cannot be read,
``stop_unlocked`` returns ``None`` (docs/triton.md, "Things worth knowing")."""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import signal
import struct
import time
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.procs import stat_fields

log = logging.getLogger(__name__)

# get_robust_list(2) by architecture: x86_64 has its own table; aarch64 uses the generic one.
_GET_ROBUST_LIST = {"x86_64": 274, "aarch64": 100, "arm64": 100}.get(platform.machine())
_WORD = struct.calcsize("P")
_libc = ctypes.CDLL(None, use_errno=True)


class Unreadable(ApplianceError, OSError):
    """A thread's robust list could not be read (permission, no such syscall, the thread exited)."""


def robust_list_head(tid: int) -> int:
    """The address of thread ``tid``'s ``struct robust_list_head`` (0 when it registered none)."""
    if _GET_ROBUST_LIST is None:
        raise Unreadable(f"no get_robust_list for {platform.machine()}")
    head, size = ctypes.c_void_p(), ctypes.c_size_t()
    if _libc.syscall(_GET_ROBUST_LIST, tid, ctypes.byref(head), ctypes.byref(size)) != 0:
        err = ctypes.get_errno()
        raise Unreadable(err, f"get_robust_list({tid}): {os.strerror(err)}")
    return head.value or 0


def holds_robust_lock(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether any thread of ``pid`` holds (or is taking or releasing) a robust mutex.

    Only meaningful while the process is stopped; raises ``Unreadable`` when a list cannot be read. A list is
    empty when its ``next`` points back at its head and no operation is pending on it."""
    try:
        tids = [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
        with open(proc / str(pid) / "mem", "rb", buffering=0) as mem:
            for tid in tids:
                head = robust_list_head(tid)
                if not head:
                    continue
                mem.seek(head)
                raw = mem.read(3 * _WORD)
                if len(raw) != 3 * _WORD:
                    raise Unreadable(f"short read of thread {tid}'s robust list")
                first, _offset, pending = struct.unpack("3P", raw)
                if first != head or pending:
                    return True
    except Unreadable:
        raise
    except OSError as exc:
        raise Unreadable(exc.errno, f"robust lists of {pid}: {exc.strerror or exc}") from exc
    return False


def _wait_stopped(pid: int, proc: Path, timeout: float) -> bool:
    """Whether every thread of ``pid`` reached the stopped state ('T') within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fields = [stat_fields(t / "stat") for t in (proc / str(pid) / "task").iterdir()]
        except OSError:
            return False
        if not all(fields):  # a thread gone meanwhile
            return False
        states = [f[0] for f in fields]
        if states and all(s in ("T", "t") for s in states):
            return True
        if any(s in ("Z", "X") for s in states):  # exiting: nothing to wait for
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.0005)


def stop_and_look(pid: int, proc: Path = Path("/proc")) -> bool | None:
    """SIGSTOP ``pid`` (it is left stopped) and say whether one of its threads holds a robust mutex; None when that
    cannot be known (its threads did not all stop within 1 s, or their lists cannot be read). Raises
    ``ProcessLookupError`` when the process is gone."""
    os.kill(pid, signal.SIGSTOP)
    if not _wait_stopped(pid, proc, 1.0):
        return None
    try:
        return holds_robust_lock(pid, proc)
    except Unreadable as exc:
        log.debug("cannot read the robust lists of %d (%s)", pid, exc)
        return None


def stop_unlocked(pid: int, attempts: int = 500, proc: Path = Path("/proc")) -> bool | None:
    """SIGSTOP ``pid`` at a moment none of its threads holds a robust mutex; it is left stopped.

    True: stopped outside every robust lock. False: ``attempts`` (at least 1) tries each found a lock held (left
    stopped anyway). None: the lists cannot be read here (left stopped); the caller cannot know and kills
    regardless. Raises ``ProcessLookupError`` when the process is gone."""
    for attempt in range(1, attempts + 1):
        held = stop_and_look(pid, proc)
        if held is None:
            return None
        if not held:
            if attempt > 1:
                log.info("process %d held a shared lock; stopped it outside the lock after %d tries", pid, attempt)
            return True
        if attempt < attempts:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.001)  # let it leave the lock
    return False
