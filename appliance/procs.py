"""Stopping a child process: one rule for ``subprocess.Popen`` and ``multiprocessing.Process`` (``stop_process``).

Ground floor: the standard library only, so capture, the benchmarks and the test support all use it."""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Callable, Optional, Union

Child = Union["subprocess.Popen[Any]", multiprocessing.process.BaseProcess]


def stat_fields(stat: Path) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` (or ``/proc/<pid>/task/<tid>/stat``) file after ``(comm)``: the state
    (``R``, ``S``, ``T``, ``Z``...), then the ppid, and so on. Empty when it cannot be read (the process is gone).
    comm may hold spaces and parentheses, so the fields start after the last ')'."""
    try:
        text = stat.read_text()
    except OSError:
        return []
    return text[text.rfind(")") + 1 :].split() if ")" in text else []


def stop_process(proc: Child, *, timeout_s: float, kill_timeout_s: Optional[float] = None, resume: bool = False,
                 on_kill: Optional[Callable[[], object]] = None) -> int | None:
    """SIGTERM ``proc``, wait ``timeout_s``, SIGKILL it if it is still running. The rule, in order:

    1. A child that has already exited is only reaped; its exit code is returned.
    2. Otherwise it gets SIGTERM (then SIGCONT with ``resume=True``, so a SIGSTOPped child runs to handle it), and
       up to ``timeout_s`` to exit.
    3. A child still running then gets SIGKILL (``on_kill`` is called first, e.g. to log that it ignored SIGTERM)
       and is waited for up to ``kill_timeout_s`` (None: until it exits, which SIGKILL guarantees short of a
       process stuck in the kernel).
    4. The exit code is returned (negative signal number when a signal ended it, as both classes report it), or
       None if the child still had not exited after the last wait.
    """
    if _exit_code(proc) is not None:
        return _wait(proc, None)
    proc.terminate()
    if resume:
        _send(proc, signal.SIGCONT)
    code = _wait(proc, timeout_s)
    if code is not None:
        return code
    if on_kill is not None:
        on_kill()
    return kill_process(proc, timeout_s=kill_timeout_s)


def kill_process(proc: Child, *, timeout_s: Optional[float] = None) -> int | None:
    """SIGKILL ``proc`` (if it is still running) and wait up to ``timeout_s`` (None: until it exits) for its exit
    code; None if it had not exited by then."""
    if _exit_code(proc) is None:
        proc.kill()
    return _wait(proc, timeout_s)


def _exit_code(proc: Child) -> int | None:
    # Both poll without blocking and reap an exited child, so its pid cannot be reused under us.
    return proc.poll() if isinstance(proc, subprocess.Popen) else proc.exitcode


def _wait(proc: Child, timeout_s: Optional[float]) -> int | None:
    if isinstance(proc, subprocess.Popen):
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None
    proc.join(timeout_s)
    return proc.exitcode


def _send(proc: Child, sig: int) -> None:
    if isinstance(proc, subprocess.Popen):
        proc.send_signal(sig)  # checks that it has not been reaped first
    elif proc.exitcode is None and proc.pid is not None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass  # exited between the check and the signal
