"""Leftovers of an appliance that was SIGKILLed: orphaned model stubs and shared-memory regions."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.supervisor.tritonorphans import reclaim_triton_orphans


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# The fake stub answers SIGUSR1 with a line: a signal sent after a SIGKILL is never handled (kill() marks the
# whole process as exiting before it returns), so an answer proves no SIGKILL came before that signal.
_STUB_CODE = ("import signal, time; signal.signal(signal.SIGUSR1, lambda *_: print('alive', flush=True)); "
              "print('ready', flush=True); time.sleep(600)")


def _fake_stub(server_pid: int) -> subprocess.Popen[str]:
    """A real process whose argv looks like a stub's (the stub binary itself needs a live server):
    argv[0] ends in the stub's name and argv[5] is the server pid."""
    argv = ["-c", _STUB_CODE, "1048576", "1048576", str(server_pid), "/b"]
    proc = subprocess.Popen(["bash", "-c", 'exec -a /x/triton_python_backend_stub "$0" "$@"', sys.executable, *argv],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"  # exec'd, its handler in place
    assert Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"/x/triton_python_backend_stub")
    return proc


def test_stubs_of_a_dead_server_are_ended_and_live_ones_kept(tmp_path: Path) -> None:
    orphan = _fake_stub(_dead_pid())
    ours = _fake_stub(os.getpid())
    try:
        done = reclaim_triton_orphans(shm_root=tmp_path)
        # Other orphaned stubs on this machine (a crashed run elsewhere) may be reclaimed too; ours must not be.
        assert orphan.pid in done.stubs and ours.pid not in done.stubs
        assert orphan.wait(timeout=10) == -9
        os.kill(ours.pid, signal.SIGUSR1)  # the sentinel, sent after anything reclaim_triton_orphans sent
        assert ours.stdout is not None and ours.stdout.readline() == "alive\n"
        assert ours.poll() is None
    finally:
        for p in (orphan, ours):
            p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


def test_regions_of_dead_servers_are_removed_and_others_kept(tmp_path: Path) -> None:
    dead = _dead_pid()
    stale = [tmp_path / f"appliance_{dead}_1_abc", tmp_path / f"appliance_{dead}_def"]
    live = tmp_path / f"appliance_{os.getpid()}_1_abc"
    foreign = [tmp_path / "appliance-cam-line1.ring", tmp_path / "other_123_x", tmp_path / "appliance_notapid_x"]
    for path in [*stale, live, *foreign]:
        path.write_bytes(b"x")
    done = reclaim_triton_orphans(shm_root=tmp_path)
    assert sorted(done.regions) == sorted(stale)
    assert not any(p.exists() for p in stale)
    assert live.exists() and all(p.exists() for p in foreign)


def test_nothing_to_do_is_quiet(tmp_path: Path) -> None:
    done = reclaim_triton_orphans(shm_root=tmp_path)
    assert done.stubs == [] and done.regions == []


def test_another_users_region_is_kept_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A pid missing from /proc may be another user's live server (ProtectProc=invisible hides it): hands off."""
    dead = _dead_pid()
    ours, theirs = tmp_path / f"appliance_{dead}_1_abc", tmp_path / f"appliance_{dead}_2_abc"
    for path in (ours, theirs):
        path.write_bytes(b"x")
    os.chown(theirs, 65534, 65534)  # nobody (the tests run as root)
    with caplog.at_level(logging.WARNING):
        done = reclaim_triton_orphans(shm_root=tmp_path)
    assert done.regions == [ours] and theirs.exists()
    assert any(f"{theirs} alone" in r.getMessage() and "uid 65534" in r.getMessage() for r in caplog.records)


def test_a_folder_at_a_region_name_is_kept_and_does_not_stop_the_start(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The appliance's own user made it, but a region is a plain file: a folder is not provably one of ours."""
    dead = _dead_pid()
    folder, region = tmp_path / f"appliance_{dead}_x", tmp_path / f"appliance_{dead}_1_abc"
    folder.mkdir()
    region.write_bytes(b"x")
    with caplog.at_level(logging.WARNING):
        done = reclaim_triton_orphans(shm_root=tmp_path)
    assert done.regions == [region] and folder.is_dir()
    assert any(f"{folder} alone: it is not a plain file" in r.getMessage() for r in caplog.records)
