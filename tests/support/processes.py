"""Processes found in /proc: whether one is still running, a parent's children, and the Python-backend stubs a
given parent runs for a model (for tests that kill a stub or check that none was left behind)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from appliance.procs import stat_fields
from appliance.triton.stubs import StubScanner

def running(pid: int) -> bool:
    """Alive and not a zombie (an exited child waits for PID 1 to reap it; that is not a leak)."""
    fields = stat_fields(Path(f"/proc/{pid}/stat"))
    return bool(fields) and fields[0] != "Z"


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def stubs_serving(model: str, parent: int) -> list[int]:
    """Live stub processes of ``parent`` serving ``model``: the stub's first argument is
    <repository>/<model>/<version>/model.py (read by the appliance's one stub scanner)."""
    return [stub.pid for stub in StubScanner().scan()
            if not stub.zombie and stub.ppid == parent and f"/{model}/".encode() in stub.model_path]
