"""Killing a process only outside the robust mutexes it shares (appliance.triton.robustlocks).

A Python-backend stub killed while it held a mutex in its shared-memory region made Triton's next lock throw
``boost::interprocess::lock_exception`` and abort the whole process (CI, tests/triton/test_triton_stop_stuck.py).
These tests use a real robust, process-shared pthread mutex in a file mapping, held by a real child process: the
truth is what the child did with it, and what the kernel tells the next locker (EOWNERDEAD when its owner died
holding it).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.wait import wait_until

from appliance.procs import stat_fields
from appliance.triton import robustlocks

# The child: makes a robust, process-shared mutex in the file's first bytes, then either holds it until told
# ("hold") or takes it for 3 ms out of every 4 ms ("churn", so a kill at a random moment lands inside it).
_HOLDER = r"""
import ctypes, mmap, sys, time
libc = ctypes.CDLL(None)
path, mode = sys.argv[1], sys.argv[2]
with open(path, "r+b") as f:
    region = mmap.mmap(f.fileno(), 128)
mutex = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(region)))
attr = ctypes.create_string_buffer(64)
libc.pthread_mutexattr_init(attr)
libc.pthread_mutexattr_setpshared(attr, 1)  # PTHREAD_PROCESS_SHARED
libc.pthread_mutexattr_setrobust(attr, 1)   # PTHREAD_MUTEX_ROBUST
assert libc.pthread_mutex_init(mutex, attr) == 0
if mode == "hold":
    assert libc.pthread_mutex_lock(mutex) == 0
    print("locked", flush=True)
    sys.stdin.readline()
    assert libc.pthread_mutex_unlock(mutex) == 0
    print("unlocked", flush=True)
    sys.stdin.readline()
else:
    print("churning", flush=True)
    while True:
        libc.pthread_mutex_lock(mutex)
        end = time.perf_counter() + 0.003
        while time.perf_counter() < end:
            pass
        libc.pthread_mutex_unlock(mutex)
        time.sleep(0.001)
"""

_libc = ctypes.CDLL(None)


@contextmanager
def _holder(path: Path, mode: str) -> Iterator[subprocess.Popen[str]]:
    path.write_bytes(bytes(128))
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def _lock_after_death(path: Path) -> int:
    """Lock the mutex the dead child left in ``path`` from this process: 0, or EOWNERDEAD when it died holding
    it. Unlocks it again before the mapping goes (a held robust mutex stays on this thread's list)."""
    with open(path, "r+b") as f:
        region = mmap.mmap(f.fileno(), 128)
    cell = ctypes.c_char.from_buffer(region)
    mutex = ctypes.c_void_p(ctypes.addressof(cell))
    rc = _libc.pthread_mutex_lock(mutex)
    if rc in (0, errno.EOWNERDEAD):
        _libc.pthread_mutex_unlock(mutex)
    del cell
    region.close()
    return rc


def _kill(child: subprocess.Popen[str]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def test_a_held_robust_mutex_shows_on_the_stopped_process_and_is_gone_once_released(tmp_path: Path) -> None:
    with _holder(tmp_path / "mutex", "hold") as child:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "locked"
        assert robustlocks.stop_unlocked(child.pid, attempts=20) is False  # it never lets go: 20 tries in vain
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "unlocked"
        assert robustlocks.stop_unlocked(child.pid, attempts=20) is True
        assert robustlocks.holds_robust_lock(child.pid) is False
        _kill(child)
        assert _lock_after_death(tmp_path / "mutex") == 0


def test_killing_after_stop_unlocked_never_leaves_a_mutex_whose_owner_died(tmp_path: Path) -> None:
    # Control first: killed at a random moment, the churning child dies holding the mutex in most rounds
    # (3 ms of every 4), so the kernel hands the next locker EOWNERDEAD: the condition that aborted Triton.
    unguarded = []
    for round_ in range(8):
        with _holder(tmp_path / f"control{round_}", "churn") as child:
            assert child.stdout is not None and child.stdout.readline().strip() == "churning"
            time.sleep(0.02)  # into its loop
            _kill(child)
        unguarded.append(_lock_after_death(tmp_path / f"control{round_}"))
    assert errno.EOWNERDEAD in unguarded, unguarded
    guarded = []
    for round_ in range(8):
        with _holder(tmp_path / f"guarded{round_}", "churn") as child:
            assert child.stdout is not None and child.stdout.readline().strip() == "churning"
            time.sleep(0.02)
            assert robustlocks.stop_unlocked(child.pid) is True
            _kill(child)
        guarded.append(_lock_after_death(tmp_path / f"guarded{round_}"))
    assert guarded == [0] * 8


def test_a_process_that_exited_unreaped_cannot_be_looked_at() -> None:
    # A stub that exits between wait_gone's scan and its kill: a zombie never stops, so nothing can be known.
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_until(lambda: stat_fields(Path(f"/proc/{child.pid}/stat"))[:1] == ["Z"], message="the child a zombie")
        assert robustlocks.stop_unlocked(child.pid) is None
    finally:
        child.wait()


def test_a_thread_that_is_gone_cannot_be_read() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(robustlocks.Unreadable, match="get_robust_list"):
        robustlocks.robust_list_head(child.pid)
    with pytest.raises(ProcessLookupError):
        robustlocks.stop_unlocked(child.pid)
