"""Find (and, as a last resort, end) the Python-backend stub processes this process started."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

STUB_NAME = "triton_python_backend_stub"


def child_stubs(roots: Sequence[str] = (), parent: int | None = None, proc: Path = Path("/proc")) -> list[int]:
    """Pids of live (non-zombie) stub processes of ``parent`` (default: this process).

    With ``roots``, only stubs serving a model.py under one of these repository directories: that is how a
    server's stubs are told apart from another server's in the same process (the stub's first argument is
    its model.py path; the Python backend's other settings are process-wide, so they cannot tell them apart).
    """
    prefixes = [str(r).rstrip("/").encode() + b"/" for r in roots]
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
        args = cmdline.split(b"\0")
        if STUB_NAME.encode() in args[0] and (
            not prefixes or (len(args) > 1 and any(args[1].startswith(p) for p in prefixes))
        ):
            found.append(int(entry.name))
    return found


def stub_models(pids: Sequence[int], proc: Path = Path("/proc")) -> dict[int, str]:
    """The model each stub serves, from its first argument (``<repository>/<model>/<version>/model.py``)."""
    found = {}
    for pid in pids:
        try:
            args = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        if len(args) > 1 and args[1]:
            parts = Path(os.fsdecode(args[1])).parts
            if len(parts) >= 3:
                found[pid] = parts[-3]
    return found


def wait_gone(
    timeout: float,
    roots: Sequence[str],
    parent: int | None = None,
    proc: Path = Path("/proc"),
    kill: bool = True,
    shm_root: Path = Path("/dev/shm"),
) -> list[int]:
    """Wait up to ``timeout`` s for our stubs under ``roots`` to exit; SIGKILL any left (if ``kill``) and
    remove their shared-memory regions. Returns the pids still alive at the deadline."""
    if not roots:
        raise ValueError("repository roots are needed: never touch stubs that belong to another server")
    deadline = time.monotonic() + timeout
    while True:
        left = child_stubs(roots, parent, proc)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in left if kill else ():
        region = _shm_region(proc / str(pid))
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # reap it: it is our child, and nothing else will wait for it now
        except (ProcessLookupError, ChildProcessError):
            pass
        if region:  # a killed stub cannot remove its shared-memory region, and Triton does not either
            (shm_root / region).unlink(missing_ok=True)
    return left


def _shm_region(entry: Path) -> str | None:
    """The stub's shared-memory region name: its second argument (after the model.py path)."""
    try:
        args = (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    name = args[2].decode(errors="replace") if len(args) > 2 else ""
    return name if name and "/" not in name and not name.startswith(".") else None
