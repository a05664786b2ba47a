"""Triton's Python-backend stub processes and their shared-memory regions: the one scanner.

Each stub's region in ``/dev/shm`` starts with ``region_prefix(<server pid>)``, so a region names the server it
belongs to. ``StubScanner`` reads ``/proc`` and ``/dev/shm`` (constructor arguments, so tests use fixture trees)
for a server's own stubs, the supervisor's clean-up after a dead appliance, and tests (docs/triton.md)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from appliance.procs import stat_fields
from appliance.triton import robustlocks

log = logging.getLogger(__name__)

STUB_NAME = "triton_python_backend_stub"
REGION_PREFIX = "appliance"
_MODEL_ARG, _REGION_ARG, _SERVER_PID_ARG = 1, 2, 5  # positions in the stub's argv (see the module docstring)


def region_prefix(server_pid: int, prefix: str = REGION_PREFIX) -> str:
    """The ``shm-region-prefix-name`` of a server in process ``server_pid``: ``<prefix>_<pid>_``."""
    return f"{prefix}_{server_pid}_"


def region_server_pid(name: str, prefix: str = REGION_PREFIX) -> int | None:
    """The server pid in a region name made from ``region_prefix`` (``<prefix>_<pid>_...``), else None."""
    if not name.startswith(f"{prefix}_"):
        return None
    head = name[len(prefix) + 1 :].split("_", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else None


def stub_argv(cmdline: Sequence[bytes]) -> tuple[bytes, ...] | None:
    """The stub's own argv from a process's ``/proc/<pid>/cmdline``, or None when it is not a stub.

    A binary run through a binfmt_misc interpreter (qemu-user: an aarch64 stub on an x86 host in the arm64 check)
    shows the interpreter first, then the binary's path, then (with binfmt's P flag) the original argv[0]; the
    stub's arguments follow, so they are read from after the interpreter's part."""
    stub = STUB_NAME.encode()
    if cmdline and cmdline[0].endswith(stub):
        return tuple(cmdline)
    if len(cmdline) > 1 and b"qemu" in cmdline[0] and cmdline[1].endswith(stub):
        rest = cmdline[2:] if len(cmdline) > 2 and cmdline[2].endswith(stub) else cmdline[1:]
        return tuple(rest)
    return None


@dataclass(frozen=True)
class StubProcess:
    """One stub process as ``/proc`` showed it; ``ppid`` and ``state`` are None when its stat was unreadable."""

    pid: int
    argv: tuple[bytes, ...]
    ppid: int | None = None
    state: str | None = None

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @property
    def model_path(self) -> bytes:
        """Its first argument: ``<repository>/<model>/<version>/model.py``."""
        return self.argv[_MODEL_ARG] if len(self.argv) > _MODEL_ARG else b""

    @property
    def model(self) -> str | None:
        """The model it serves (from ``model_path``), or None."""
        parts = Path(os.fsdecode(self.model_path)).parts if self.model_path else ()
        return parts[-3] if len(parts) >= 3 else None

    @property
    def region(self) -> str | None:
        """Its shared-memory region's name (second argument), or None when absent or not a plain file name."""
        name = self.argv[_REGION_ARG].decode(errors="replace") if len(self.argv) > _REGION_ARG else ""
        return name if name and "/" not in name and not name.startswith(".") else None

    @property
    def server_pid(self) -> int | None:
        """The pid of the server process that started it (fifth argument), or None."""
        arg = self.argv[_SERVER_PID_ARG] if len(self.argv) > _SERVER_PID_ARG else b""
        return int(arg) if arg.isdigit() else None

    def serves_under(self, roots: Iterable[str | os.PathLike[str]]) -> bool:
        """Whether its model.py lies under one of these repository directories."""
        prefixes = [os.fsencode(r).rstrip(b"/") + b"/" for r in roots]
        return any(self.model_path.startswith(p) for p in prefixes)


class StubScanner:
    """Finds stub processes in ``proc`` and their regions in ``shm_root``."""

    def __init__(self, proc: Path = Path("/proc"), shm_root: Path = Path("/dev/shm")) -> None:
        self.proc = Path(proc)
        self.shm_root = Path(shm_root)

    def scan(self) -> list[StubProcess]:
        """Every stub process, whoever started it (processes that end while we look are skipped)."""
        found = []
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            argv = self._argv(entry.name)
            if argv is None:  # not a stub, ended while we looked, or not ours to read
                continue
            ppid, state = self._stat(entry)
            found.append(StubProcess(int(entry.name), argv, ppid, state))
        return found

    def _argv(self, pid: str) -> tuple[bytes, ...] | None:
        """Stub ``pid``'s argv (``stub_argv``); None when it is not a stub or has exited."""
        try:
            return stub_argv((self.proc / pid / "cmdline").read_bytes().split(b"\0"))
        except OSError:
            return None

    @staticmethod
    def _stat(entry: Path) -> tuple[int | None, str | None]:
        fields = stat_fields(entry / "stat")
        if len(fields) < 2 or not fields[1].isdigit():
            return None, None
        return int(fields[1]), fields[0]

    def children(self, roots: Sequence[str] = (), parent: int | None = None) -> list[int]:
        """Pids of live (non-zombie) stubs of ``parent`` (default: this process).

        With ``roots``, only stubs serving a model.py under one of these repository directories: that is how a
        server's stubs are told apart from another server's in the same process (the Python backend's other
        settings are process-wide, so they cannot tell them apart).
        """
        parent = os.getpid() if parent is None else parent
        return [s.pid for s in self.scan()
                if s.ppid == parent and not s.zombie and (not roots or s.serves_under(roots))]  # fmt: skip

    def still_children(self, pids: Sequence[int], roots: Sequence[str] = (), parent: int | None = None) -> bool:
        """Whether each of ``pids`` is still what ``children`` found: a live stub of ``parent`` (default: this
        process) serving under ``roots``. Two small reads per pid, where ``children`` reads every process's."""
        parent = os.getpid() if parent is None else parent
        for pid in pids:
            argv = self._argv(str(pid))
            if argv is None:
                return False
            stub = StubProcess(pid, argv, *self._stat(self.proc / str(pid)))
            if stub.ppid != parent or stub.zombie or (roots and not stub.serves_under(roots)):
                return False
        return True

    def under(self, root: str | os.PathLike[str]) -> list[StubProcess]:
        """Stubs serving a model under repository ``root``, whatever their parent (zombies included)."""
        return [s for s in self.scan() if s.serves_under([root])]

    def orphans(self) -> list[StubProcess]:
        """Stubs whose server process is gone (it died without stopping them)."""
        return [s for s in self.scan() if s.server_pid is not None and not self.alive(s.server_pid)]

    def models(self, pids: Iterable[int]) -> dict[int, str]:
        """The model each of these stubs serves; pids that exited meanwhile are left out."""
        found = {}
        for pid in pids:
            argv = self._argv(str(pid))
            model = StubProcess(pid, argv).model if argv is not None else None
            if model is not None:
                found[pid] = model
        return found

    def alive(self, pid: int) -> bool:
        return (self.proc / str(pid)).is_dir()

    def region_of(self, pid: int) -> str | None:
        """The region of stub ``pid`` as its command line names it (None if it has exited)."""
        argv = self._argv(str(pid))
        return StubProcess(pid, argv).region if argv is not None else None

    def remove_region(self, name: str | None) -> None:
        """Remove a stub's region: a killed stub cannot remove it, and Triton does not either."""
        if name:
            (self.shm_root / name).unlink(missing_ok=True)

    def stale_regions(self, prefix: str = REGION_PREFIX) -> list[Path]:
        """Regions named after a server pid (``region_prefix``) that is no longer alive, sorted."""
        found = []
        for region in sorted(self.shm_root.glob(f"{prefix}_*")):
            pid = region_server_pid(region.name, prefix)
            if pid is not None and not self.alive(pid):
                found.append(region)
        return found


def wait_gone(
    timeout: float,
    roots: Sequence[str],
    parent: int | None = None,
    kill: bool = True,
    scanner: StubScanner | None = None,
) -> list[int]:
    """Wait up to ``timeout`` s for our stubs under ``roots`` to exit; SIGKILL any left (if ``kill``) and
    remove their shared-memory regions. Returns the pids still alive at the deadline.

    A stub is killed only at a moment it holds none of the mutexes it shares with this process
    (``robustlocks.stop_unlocked``): killed inside one, the next lock here aborts the whole process."""
    if not roots:
        raise ValueError("repository roots are needed: never touch stubs that belong to another server")
    scanner = scanner or StubScanner()
    deadline = time.monotonic() + timeout
    while True:
        left = scanner.children(roots, parent)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in left if kill else ():
        region = scanner.region_of(pid)
        try:
            if robustlocks.stop_unlocked(pid) is False:
                log.warning("stub %d kept holding a lock it shares with this process; killing it anyway", pid)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # reap it: it is our child, and nothing else will wait for it now
        except (ProcessLookupError, ChildProcessError):
            pass
        scanner.remove_region(region)
    return left


class KnownStubs:
    """A server's stubs as a scan last found them (``StubScanner.children``), kept while each still runs and no
    model was loaded or unloaded since: stubs start and stop only then, and a scan reads every process's command
    line where checking the known ones reads two small files each. Not ``keep``: every call scans (a server whose
    model control is ``poll`` loads models on its own)."""

    def __init__(self, scanner: StubScanner, keep: bool = True) -> None:
        self._scanner = scanner
        self._keep = keep
        self._changes = 0  # model loads and unloads ended so far
        self._known: tuple[int, list[int]] | None = None  # (changes when scanned, pids)

    def pids(self, roots: Sequence[str]) -> list[int]:
        """This process's live stubs serving under ``roots``."""
        changes, known = self._changes, self._known
        if self._keep and known is not None and known[0] == changes and self._scanner.still_children(known[1], roots):
            return list(known[1])
        found = self._scanner.children(roots)
        self._known = (changes, found)
        return list(found)

    @contextlib.contextmanager
    def changing(self) -> Iterator[None]:
        """Around a model load or unload: the next ``pids`` scans again, whether it succeeded or not."""
        try:
            yield
        finally:
            self._changes += 1
