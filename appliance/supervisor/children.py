"""Restart records for child processes (capture, one per camera).

A child that dies is restarted after an exponential backoff. A child that keeps dying — ``max_restarts``
within ``window_s`` — is a crash loop: it is reported (state, last exit code, log line with what to check)
and retried only at the slowest backoff, so one broken camera never spins the CPU or hides behind restarts.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from appliance.backoff import RestartPolicy

log = logging.getLogger(__name__)


class Child(Protocol):
    """What a supervised child must offer (multiprocessing.Process does)."""

    def start(self) -> None: ...
    def is_alive(self) -> bool: ...
    @property
    def exitcode(self) -> int | None: ...


class ChildState(enum.Enum):
    RUNNING = "running"
    BACKOFF = "backoff"
    CRASH_LOOP = "crash_loop"
    STOPPED = "stopped"


@dataclass
class ChildRecord:
    name: str
    factory: Callable[[], Child]
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    on_restart: Callable[[str], None] | None = None  # e.g. reclaim the camera's shared memory
    child: Child | None = None
    state: ChildState = ChildState.STOPPED
    restarts: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    last_exitcode: int | None = None
    restart_at: float | None = None


class ChildSupervisor:
    """Starts registered children and restarts the dead ones on ``poll()``; the clock is injectable."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._records: dict[str, ChildRecord] = {}

    def register(self, name: str, factory: Callable[[], Child], policy: RestartPolicy | None = None,
                 on_restart: Callable[[str], None] | None = None) -> ChildRecord:
        if name in self._records:
            raise ValueError(f"child {name!r} is already registered")
        record = ChildRecord(name, factory, policy or RestartPolicy(), on_restart)
        self._records[name] = record
        return record

    def records(self) -> list[ChildRecord]:
        return list(self._records.values())

    def start_all(self) -> None:
        for record in self._records.values():
            self._start(record)

    def start(self, name: str) -> None:
        """Start one registered child now (one registered after ``start_all``)."""
        self._start(self._records[name])

    def remove(self, name: str, stop: Callable[[Child], object]) -> None:
        """Stop the child with ``stop`` and forget its record: it is no longer restarted."""
        record = self._records.pop(name)
        if record.child is not None and record.state is not ChildState.STOPPED:
            stop(record.child)
        record.state = ChildState.STOPPED

    def _start(self, record: ChildRecord) -> None:
        record.child = record.factory()
        record.child.start()
        record.state = ChildState.RUNNING
        record.restart_at = None

    def poll(self) -> list[ChildRecord]:
        """Restart children that died and whose backoff has passed; return the records that changed."""
        now = self._clock()
        changed = []
        for record in self._records.values():
            if record.state is ChildState.STOPPED or record.child is None:
                continue
            if record.state is ChildState.RUNNING and not record.child.is_alive():
                record.last_exitcode = record.child.exitcode
                self._schedule_restart(record, now)
                changed.append(record)
            elif record.restart_at is not None and now >= record.restart_at:
                if record.on_restart is not None:
                    record.on_restart(record.name)
                record.restarts.append(now)
                self._start(record)
                log.info("%s: restarted (%d restarts in the last %.0f s)", record.name,
                         self._recent(record, now), record.policy.window_s)
                changed.append(record)
        return changed

    def _recent(self, record: ChildRecord, now: float) -> int:
        return sum(1 for t in record.restarts if now - t <= record.policy.window_s)

    def _schedule_restart(self, record: ChildRecord, now: float) -> None:
        recent = self._recent(record, now)
        policy = record.policy
        if recent >= policy.max_restarts:
            record.state = ChildState.CRASH_LOOP
            delay = policy.max_backoff_s
            log.error("%s: crash loop: exited with code %s after %d restarts in %.0f s; retrying every %.0f s. "
                      "Check the camera's source and the log lines above.", record.name, record.last_exitcode,
                      recent, policy.window_s, delay)
        else:
            record.state = ChildState.BACKOFF
            delay = policy.backoff(recent + 1)
            log.warning("%s: exited with code %s; restarting in %.1f s", record.name, record.last_exitcode, delay)
        record.restart_at = now + delay

    def stop_all(self, stop: Callable[[Child], object]) -> None:
        """Stop every child with ``stop`` (the caller knows how: SIGTERM, join, then SIGKILL)."""
        for record in self._records.values():
            if record.child is not None and record.state is not ChildState.STOPPED:
                stop(record.child)
            record.state = ChildState.STOPPED
