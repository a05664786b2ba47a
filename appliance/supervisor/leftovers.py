"""Clean up after an appliance that died without stopping (SIGKILL, OOM kill, power loss in a container).

Triton's Python-backend stubs do not exit when their server process dies: each keeps a model (and its
memory) loaded, and its shared-memory region stays in /dev/shm. At start the supervisor ends the stubs whose
server is gone and removes regions named after a dead server pid (``<prefix>_<pid>_...``).
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

STUB_NAME = "triton_python_backend_stub"
PARENT_PID_ARG = 5  # stub argv: stub, model.py, region, shm size, growth, server pid, backend dir, ...


@dataclass
class Reclaimed:
    stubs: list[int] = field(default_factory=list)
    regions: list[Path] = field(default_factory=list)


def _alive(pid: int, proc: Path) -> bool:
    return (proc / str(pid)).is_dir()


def _orphaned_stubs(proc: Path) -> list[int]:
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile, or not ours to read
            continue
        if not argv or not argv[0].endswith(STUB_NAME.encode()) or len(argv) <= PARENT_PID_ARG:
            continue
        server = argv[PARENT_PID_ARG]
        if server.isdigit() and not _alive(int(server), proc):
            found.append(int(entry.name))
    return found


def reclaim_leftovers(prefix: str = "appliance", proc: Path = Path("/proc"), shm_root: Path = Path("/dev/shm"),
                      kill: bool = True) -> Reclaimed:
    """End stubs whose server died and remove shared-memory regions of dead servers; say what was done."""
    done = Reclaimed()
    for pid in _orphaned_stubs(proc):
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        done.stubs.append(pid)
    for region in sorted(shm_root.glob(f"{prefix}_*")):
        parts = region.name[len(prefix) + 1:].split("_", 1)
        if parts[0].isdigit() and not _alive(int(parts[0]), proc):
            try:
                region.unlink()
            except FileNotFoundError:
                continue
            done.regions.append(region)
    if done.stubs or done.regions:
        log.warning("cleaned up after an appliance that did not stop cleanly: ended %d Triton model process(es) "
                    "%s, removed %d shared-memory region(s)", len(done.stubs), done.stubs, len(done.regions))
    return done
