"""CaptureProcess: a real spawned capture process per camera, as the supervisor drives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from support.journal import FakeJournald
from support.wait import wait_until

from appliance.capture import (
    EXIT_CONFIG,
    EXIT_OK,
    CaptureProcess,
    CaptureStartError,
    CaptureState,
    RingReader,
    ring_path,
)


@pytest.fixture
def capture(camera, video, shm_root):
    procs = []

    def start(**overrides) -> CaptureProcess:
        cam = camera({"type": "file", "path": str(video)}, **{"fps": 30, **overrides})
        proc = CaptureProcess(cam, shm_root=shm_root)
        procs.append(proc)
        proc.start()
        return proc

    yield start
    for proc in procs:
        proc.close()


def test_frames_flow_to_a_reader_and_stop_is_clean(capture, shm_root):
    proc = capture()
    assert proc.is_alive() and proc.exitcode is None
    with proc.reader() as reader:
        wait_until(lambda: reader.health().frames >= 10, 60, 0.02, "10 frames")
        lease = wait_until(lambda: reader.acquire_latest(), 10, 0.02, "a lease")
        with lease:
            assert lease.meta.camera_id == "cam0" and lease.array.shape == (240, 320, 3) and lease.array.std() > 10
        h = proc.health()
        assert h.state == CaptureState.STREAMING and h.writer_alive and h.writer_pid == proc.pid
    assert proc.stop() == EXIT_OK and not proc.is_alive()
    assert proc.health().state == CaptureState.STOPPED and not proc.health().writer_alive
    assert ring_path(shm_root, "cam0").exists()  # the ring outlives the process...
    proc.close()
    assert not ring_path(shm_root, "cam0").exists()  # ...until the camera is closed


def test_sigkilled_capture_is_restarted_on_the_same_ring(capture, shm_root):
    proc = capture()
    path = ring_path(shm_root, "cam0")
    inode = path.stat().st_ino
    reader = RingReader(path)  # a reader the restart must not disturb
    wait_until(lambda: reader.health().frames >= 5, 60, 0.02, "5 frames")
    os.kill(proc.pid, signal.SIGKILL)
    wait_until(lambda: not proc.is_alive(), 30, 0.02, "the process to die")
    assert proc.exitcode == -signal.SIGKILL and not reader.writer_alive()
    before = reader.latest_seq
    proc.start()
    wait_until(lambda: reader.latest_seq >= before + 5, 60, 0.02, "frames after the restart")
    with reader.acquire_latest(after_seq=before) as lease:  # same mapping, sequence continues
        assert lease.meta.seq > before and lease.array.std() > 10
    h = reader.health()
    assert h.generation == 2 and h.writer_alive and h.state == CaptureState.STREAMING
    assert path.stat().st_ino == inode and sorted(p.name for p in shm_root.iterdir()) == [path.name]
    reader.close()


def test_start_while_running_is_refused(capture):
    proc = capture()
    with pytest.raises(CaptureStartError, match="already running"):
        proc.start()


def test_impossible_size_exits_with_the_config_code_and_the_reason(capture):
    proc = capture(width=640, height=480)
    wait_until(lambda: proc.exitcode is not None, 60, 0.02, "the process to exit")
    assert proc.exitcode == EXIT_CONFIG
    h = proc.health()
    assert h.state == CaptureState.FAILED
    assert "delivers 320x240 frames but the camera is configured for 640x480" in h.last_error


_CRASHING_SUPERVISOR = textwrap.dedent(
    """
    import json, sys, time
    from appliance.capture import CameraConfig, CaptureProcess
    if __name__ == "__main__":
        proc = CaptureProcess(CameraConfig.model_validate(json.loads(sys.argv[1])), shm_root=sys.argv[2])
        proc.start()
        print(proc.pid, flush=True)
        time.sleep(120)
    """
)


def test_leftovers_of_a_killed_supervisor_are_reclaimed(camera, video, shm_root, tmp_path):
    cam = camera({"type": "file", "path": str(video)}, fps=30)
    script = tmp_path / "supervisor.py"
    script.write_text(_CRASHING_SUPERVISOR)
    sup = subprocess.Popen(
        [sys.executable, str(script), json.dumps(cam.model_dump(mode="json")), str(shm_root)], stdout=subprocess.PIPE,
        text=True
    )
    try:
        child = int(sup.stdout.readline())
    finally:
        sup.kill()  # the supervisor dies without cleaning up
        sup.wait()
        sup.stdout.close()
    path = ring_path(shm_root, "cam0")
    assert path.exists()
    with RingReader(path) as leftover:
        wait_until(lambda: not leftover.writer_alive(), 30, 0.02,
                   f"orphaned capture process {child} to notice and exit")
    proc = CaptureProcess(cam, shm_root=shm_root)
    try:
        proc.start()
        with proc.reader() as reader:
            wait_until(lambda: reader.health().frames >= 5, 60, 0.02, "frames in the reclaimed ring")
            assert reader.health().generation == 1  # reinitialised, not a continuation of the dead run
    finally:
        proc.close()
    assert list(shm_root.iterdir()) == []


def test_a_camera_dead_for_thousands_of_attempts_keeps_retrying(camera, tmp_path, shm_root):
    """A camera dead for ~8.5 hours at the default 30 s cap reaches attempt 1024, where 2.0**1024 overflows a
    float. Here the same schedule runs in compressed time (sub-millisecond delays) in a real capture process:
    it must still be alive and retrying well past that attempt."""
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00garbage" * 4000)
    cam = camera({"type": "file", "path": str(junk)}, backoff={"initial_s": 0.0001, "max_s": 0.0002, "jitter": 0.2})
    proc = CaptureProcess(cam, shm_root=shm_root)
    try:
        proc.start()
        with proc.reader() as reader:
            wait_until(lambda: reader.health().reconnects >= 1200 or not proc.is_alive(), 300, 0.02,
                       "1200 failed attempts")
            assert proc.is_alive(), f"capture process exited with {proc.exitcode}: {reader.health().last_error}"
            h = reader.health()
            assert h.reconnects >= 1200 and h.frames == 0 and h.writer_alive
            assert h.state in (CaptureState.BACKOFF, CaptureState.CONNECTING)
            assert "could not open file" in h.last_error
    finally:
        proc.close()


def test_a_capture_process_logs_its_warnings_to_the_journal_with_its_camera(camera, tmp_path, shm_root,
                                                                            monkeypatch):
    """Under systemd (JOURNAL_STREAM set) a capture process logs through the journald handler: its reconnect
    warnings carry CAMERA= and priority 4, so `journalctl CAMERA=cam0` and `journalctl -p warning` find them."""
    journald = FakeJournald(tmp_path / "journal.sock", timeout_s=60)
    monkeypatch.setenv("JOURNAL_STREAM", "8:4242")  # what systemd sets; the spawned child inherits it
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00garbage" * 4000)
    cam = camera({"type": "file", "path": str(junk)}, backoff={"initial_s": 0.05, "max_s": 0.1})
    proc = CaptureProcess(cam, shm_root=shm_root, journal_socket=journald.path)
    try:
        proc.start()
        entry = journald.receive()
        while "reconnecting in" not in entry["MESSAGE"]:
            entry = journald.receive()
    finally:
        proc.close()
        journald.close()
    assert entry["CAMERA"] == "cam0" and entry["PRIORITY"] == "4", entry
    assert entry["LOGGER"] == "appliance.capture.loop" and entry["SYSLOG_IDENTIFIER"] == "appliance"
    assert "could not open file" in entry["MESSAGE"] and "junk.mp4" in entry["MESSAGE"]
