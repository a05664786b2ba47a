"""appliance.procs.stop_process and kill_process on real child processes, both subprocess.Popen and
multiprocessing.Process: one that exits on SIGTERM, one that ignores it and must be SIGKILLed, one already
gone, one paused with SIGSTOP."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.wait import wait_until

from appliance.procs import kill_process, stat_fields, stop_process

_CHILD = """
import signal, sys, time
mode = sys.argv[1]
if mode == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "clean":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("ready", flush=True)
time.sleep(120)
"""


def _popen(mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"  # its handler is in place
    proc.stdout.close()
    return proc


def _mp_child(ignore_term: bool, ready: multiprocessing.connection.Connection) -> None:
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.send("ready")
    time.sleep(120)


def _mp(ignore_term: bool) -> multiprocessing.Process:
    parent, child = multiprocessing.Pipe(duplex=False)
    proc = multiprocessing.Process(target=_mp_child, args=(ignore_term, child), daemon=True)
    proc.start()
    assert parent.poll(30) and parent.recv() == "ready"
    return proc


def _wait_until_zombie(pid: int, timeout_s: float = 30.0) -> None:
    wait_until(lambda: stat_fields(Path(f"/proc/{pid}/stat"))[:1] == ["Z"], timeout_s, 0.01, f"pid {pid} to exit")


def test_a_popen_child_that_exits_on_sigterm_is_not_killed() -> None:
    kills: list[int] = []
    proc = _popen("default")
    start = time.monotonic()
    assert stop_process(proc, timeout_s=30, on_kill=lambda: kills.append(1)) == -signal.SIGTERM
    assert time.monotonic() - start < 10 and kills == [] and proc.returncode == -signal.SIGTERM
    clean = _popen("clean")
    assert stop_process(clean, timeout_s=30) == 7  # its own exit code, from its SIGTERM handler


def test_a_popen_child_that_ignores_sigterm_is_killed_after_the_timeout() -> None:
    kills: list[float] = []
    proc = _popen("ignore")
    start = time.monotonic()
    code = stop_process(proc, timeout_s=0.5, on_kill=lambda: kills.append(time.monotonic() - start))
    assert code == -signal.SIGKILL and proc.returncode == -signal.SIGKILL
    assert len(kills) == 1 and kills[0] >= 0.5  # it was given its full timeout first


def test_a_multiprocessing_child_that_exits_on_sigterm_is_not_killed() -> None:
    kills: list[int] = []
    proc = _mp(ignore_term=False)
    assert stop_process(proc, timeout_s=30, on_kill=lambda: kills.append(1)) == -signal.SIGTERM
    assert kills == [] and not proc.is_alive() and proc.exitcode == -signal.SIGTERM


def test_a_multiprocessing_child_that_ignores_sigterm_is_killed_after_the_timeout() -> None:
    kills: list[float] = []
    proc = _mp(ignore_term=True)
    start = time.monotonic()
    code = stop_process(proc, timeout_s=0.5, kill_timeout_s=30, on_kill=lambda: kills.append(time.monotonic() - start))
    assert code == -signal.SIGKILL and not proc.is_alive()
    assert len(kills) == 1 and kills[0] >= 0.5


def test_a_child_that_already_exited_is_only_reaped() -> None:
    kills: list[int] = []
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    wait_until(lambda: done.poll() is not None, 30, 0.01, "the child to exit")  # reaped before stop_process sees it
    assert stop_process(done, timeout_s=30, on_kill=lambda: kills.append(1)) == 3
    zombie = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
    _wait_until_zombie(zombie.pid)  # exited, not yet reaped
    assert stop_process(zombie, timeout_s=30, on_kill=lambda: kills.append(1)) == 4 and kills == []
    mp_proc = multiprocessing.Process(target=sys.exit, args=(5,))
    mp_proc.start()
    mp_proc.join(30)
    assert stop_process(mp_proc, timeout_s=30, on_kill=lambda: kills.append(1)) == 5 and kills == []


def test_resume_lets_a_paused_child_handle_sigterm_itself() -> None:
    paused = _popen("clean")
    paused.send_signal(signal.SIGSTOP)
    assert stop_process(paused, timeout_s=30, resume=True) == 7  # woke up and ran its handler
    still_paused = _popen("clean")
    still_paused.send_signal(signal.SIGSTOP)
    assert stop_process(still_paused, timeout_s=0.5) == -signal.SIGKILL  # without resume it never ran


def test_kill_process_kills_without_asking_and_reaps() -> None:
    proc = _popen("ignore")
    assert kill_process(proc, timeout_s=30) == -signal.SIGKILL and proc.returncode == -signal.SIGKILL
    assert kill_process(proc) == -signal.SIGKILL  # already gone: only its code
    mp_proc = _mp(ignore_term=True)
    assert kill_process(mp_proc) == -signal.SIGKILL and not mp_proc.is_alive()


def test_stat_fields_start_after_comm_even_when_it_holds_spaces_and_parentheses(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("4242 (a) b (c) T 17 4242 4242 0 -1\n")
    assert stat_fields(stat)[:2] == ["T", "17"]
    assert stat_fields(Path(f"/proc/{os.getpid()}/stat"))[:2] == ["R", str(os.getppid())]
    assert stat_fields(tmp_path / "gone") == []
