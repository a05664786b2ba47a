"""The doorbell capture processes ring after each frame, so the scheduler sleeps instead of polling rings."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import Future

from support.wait import wait_until

from appliance.capture import CaptureProcess
from appliance.capture.doorbell import Doorbell, DoorbellRinger
from appliance.pipeline.scheduler import Scheduler


def test_wait_times_out_when_nobody_rings_and_one_wait_consumes_every_pending_ring():
    bell = Doorbell()
    try:
        assert bell.wait(0.05) is False
        for _ in range(5):
            bell.ring()
        assert bell.wait(5) is True
        assert bell.wait(0.05) is False  # the five rings were one wake-up
    finally:
        bell.close()


def test_another_process_rings_it_by_address():
    bell = Doorbell()
    try:
        code = ("import sys; from appliance.capture.doorbell import DoorbellRinger; "
                "r = DoorbellRinger(sys.argv[1]); r.ring(); r.close()")
        subprocess.run([sys.executable, "-c", code, bell.address], check=True, timeout=60)
        assert bell.wait(5) is True
    finally:
        bell.close()


def test_ringing_never_fails_the_ringer_when_the_bell_is_full_or_gone():
    bell = Doorbell()
    ringer = DoorbellRinger(bell.address)
    for _ in range(100_000):  # far beyond the socket buffer: the excess is dropped, one wake-up remains
        ringer.ring()
    assert bell.wait(5) is True
    bell.close()
    ringer.ring()  # nobody listens any more: still no error for the capture process
    ringer.close()


def test_a_capture_process_rings_once_per_frame(camera, video, shm_root):
    bell = Doorbell()
    proc = CaptureProcess(camera({"type": "file", "path": str(video)}, fps=10), shm_root=shm_root,
                          doorbell=bell.address)
    try:
        proc.start()
        with proc.reader() as reader:
            for _ in range(3):
                before = reader.latest_seq
                assert bell.wait(30), "the capture process published frames but never rang"
                wait_until(lambda: reader.latest_seq > before, 10, 0.02, "the frame the ring announced")
    finally:
        proc.close()
        bell.close()


def test_the_scheduler_sleeps_on_the_bell_and_a_frame_wakes_it(camera, video, shm_root):
    """With a one-minute backstop, frames are still submitted as they come: the ring woke the scheduler."""
    bell = Doorbell()
    submitted: list[tuple[int, float]] = []

    def submit(camera_id, lease):
        submitted.append((lease.meta.seq, time.monotonic()))
        lease.release()
        future: Future = Future()
        future.set_result(None)
        return future

    scheduler = Scheduler(submit, lambda *a: None, wakeup=bell, idle_wait_s=60.0)
    proc = CaptureProcess(camera({"type": "file", "path": str(video)}, fps=5), shm_root=shm_root,
                          doorbell=bell.address)
    try:
        proc.start()
        with proc.reader() as reader:
            scheduler.add_camera("cam0", reader, 5)
            scheduler.start()
            wait_until(lambda: len(submitted) >= 5, 50, 0.02, "5 frames submitted with a 60 s polling backstop")
            assert scheduler.stop(5) is True  # stop rings too: the loop does not sit out its backstop
        seqs = [seq for seq, _ in submitted]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    finally:
        proc.close()
        bell.close()
