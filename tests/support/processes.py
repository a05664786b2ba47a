"""Processes found in /proc: whether one is still running, a parent's children, and the Python-backend stubs a
given parent runs for a model (for tests that kill a stub or check that none was left behind)."""

from __future__ import annotations

import subprocess
from pathlib import Path

STUB = b"triton_python_backend_stub"


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited child waits for PID 1 to reap it; that is not a leak)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def stubs_serving(model: str, parent: int) -> list[int]:
    """Live stub processes of ``parent`` serving ``model``, found in /proc by name and parent pid (as
    appliance.supervisor.leftovers does): the stub's first argument is <repository>/<model>/<version>/model.py."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if argv[0].endswith(STUB) and len(argv) > 1 and fields[0] != "Z" and int(fields[1]) == parent \
                and f"/{model}/".encode() in argv[1]:
            found.append(int(entry.name))
    return found
