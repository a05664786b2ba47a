"""Processes found in /proc around a device under test: whether one is still running, and a parent's children
(the capture processes and model stubs the soak and the tests look for after a stop)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from appliance.procs import stat_fields


def running(pid: int, proc: Path = Path("/proc")) -> bool:
    """Alive and not a zombie (an exited child waits for PID 1 to reap it; that is not a leak)."""
    fields = stat_fields(proc / str(pid) / "stat")
    return bool(fields) and fields[0] != "Z"


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now (``ps --ppid``)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]
