"""Triton model processes and shared-memory regions orphaned by an appliance that died without stopping (SIGKILL,
OOM kill, power loss in a container), reclaimed at start.

Triton's Python-backend stubs do not exit when their server process dies: each keeps a model (and its
memory) loaded, and its shared-memory region stays in /dev/shm. At start the supervisor ends the stubs whose
server is gone and removes regions named after a dead server pid (``<prefix>_<pid>_...``). Finding them is
``appliance.triton.stubs.StubScanner``'s job; deciding to end them and saying so is this module's.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path

from appliance.triton.stubs import REGION_PREFIX, StubScanner

log = logging.getLogger(__name__)


@dataclass
class Reclaimed:
    stubs: list[int] = field(default_factory=list)
    regions: list[Path] = field(default_factory=list)


def reclaim_triton_orphans(prefix: str = REGION_PREFIX, proc: Path = Path("/proc"),
                           shm_root: Path = Path("/dev/shm"), kill: bool = True) -> Reclaimed:
    """End stubs whose server died and remove shared-memory regions of dead servers; say what was done.

    Only this user's stubs and plain-file regions are touched: a pid missing from ``proc`` may be another user's
    live process (systemd's ``ProtectProc=invisible`` hides them), so what belongs to another user, or is no plain
    file, is logged and left."""
    scanner = StubScanner(proc, shm_root)
    done = Reclaimed()
    for stub in scanner.orphans():
        if not _ours(proc / str(stub.pid), f"Triton model process {stub.pid}"):
            continue
        if kill:
            try:
                os.kill(stub.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        done.stubs.append(stub.pid)
    for region in scanner.stale_regions(prefix):
        if not _ours(region, "shared-memory region", regular=True):
            continue
        try:
            region.unlink()
        except FileNotFoundError:
            continue
        done.regions.append(region)
    if done.stubs or done.regions:
        log.warning("cleaned up after an appliance that did not stop cleanly: ended %d Triton model process(es) "
                    "%s, removed %d shared-memory region(s)", len(done.stubs), done.stubs, len(done.regions))
    return done


def _ours(path: Path, what: str, regular: bool = False) -> bool:
    """Whether ``path`` (a /proc entry or a region file; a link is not followed) belongs to this user and, with
    ``regular``, is a plain file (a region is one; a folder or device at a region's name is not ours); else log."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if regular and not stat.S_ISREG(st.st_mode):
        log.warning("leaving %s %s alone: it is not a plain file", what, path)
        return False
    if st.st_uid == os.geteuid():  # unlinking a link of ours removes the link, never its target
        return True
    log.warning("leaving %s %s alone: it belongs to uid %d, not this appliance's user", what, path, st.st_uid)
    return False
