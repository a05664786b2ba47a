"""Find (and, as a last resort, end) the Python-backend stub processes this process started."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

STUB_NAME = "triton_python_backend_stub"


def child_stubs(parent: int | None = None, proc: Path = Path("/proc")) -> list[int]:
    """Pids of live (non-zombie) stub processes whose parent is ``parent`` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # the process ended while we looked
            continue
        # stat: "pid (comm) state ppid ..." - comm may hold spaces, so split after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] == "Z" or int(fields[1]) != parent:
            continue
        if STUB_NAME.encode() in cmdline.split(b"\0", 1)[0]:
            found.append(int(entry.name))
    return found


def wait_gone(timeout: float, parent: int | None = None, proc: Path = Path("/proc")) -> list[int]:
    """Wait up to ``timeout`` s for our stubs to exit; SIGKILL any left; return the pids that were killed."""
    deadline = time.monotonic() + timeout
    while True:
        left = child_stubs(parent, proc)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # reap it: it is our child, and nothing else will wait for it now
        except (ProcessLookupError, ChildProcessError):
            pass
    return left
