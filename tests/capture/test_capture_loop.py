"""The capture state machine driven in-process (a thread) with real sources and a real ring."""

from __future__ import annotations

import contextlib
import random
import statistics
import threading

import pytest
from support.wait import wait_until

from appliance.backoff import Backoff
from appliance.capture.layout import CaptureState
from appliance.capture.loop import CaptureLoop
from appliance.capture.process import ring_geometry
from appliance.capture.ring import RingReader, RingWriter
from appliance.capture.ringfile import create_ring, ring_path
from appliance.capture.sources import make_source
from appliance.capture.sources.gstreamer import GStreamerPipe

NOTHING = "videotestsrc is-live=true ! valve drop=true"  # connects fine, never yields a frame


@contextlib.contextmanager
def running(camera, shm_root, factory=None, **loop_kw):
    """Run a CaptureLoop in a thread on a fresh ring; yield (loop, reader, result dict); stop on exit."""
    path = ring_path(shm_root, camera.id)
    with create_ring(path, ring_geometry(camera), camera.id):
        writer, reader = RingWriter(path), RingReader(path)
        loop = CaptureLoop(camera, writer, factory or (lambda: make_source(camera)), rng=random.Random(1), **loop_kw)
        stop, result = threading.Event(), {}
        thread = threading.Thread(target=lambda: result.setdefault("state", loop.run(stop)))
        thread.start()
        try:
            yield loop, reader, result
        finally:
            stop.set()
            thread.join(30)
            assert not thread.is_alive(), "capture loop did not stop"
            writer.close(result.get("state", CaptureState.STOPPED))
            result["final"] = reader.health()
            reader.close()


def test_file_streams_into_the_ring_and_stops_cleanly(camera, video, shm_root):
    cam = camera({"type": "file", "path": str(video)}, fps=30)
    with running(cam, shm_root) as (_, reader, result):
        wait_until(lambda: reader.health().frames >= 20, 30, 0.02, "20 frames")
        health = reader.health()
        assert health.state == CaptureState.STREAMING and health.writer_alive
        with reader.acquire_latest() as lease:
            assert lease.array.std() > 10 and 1 <= lease.meta.seq <= reader.latest_seq
    assert result["state"] == CaptureState.STOPPED == result["final"].state
    assert not result["final"].writer_alive and result["final"].fps == 0


def test_source_that_delivers_nothing_is_detected_as_stalled_and_retried(camera, shm_root):
    cam = camera({"type": "gstreamer", "pipeline": NOTHING}, stall_timeout_s=0.5)
    seen = set()
    with running(cam, shm_root) as (_, reader, _result):
        def stalled_and_retried():
            h = reader.health()
            seen.add(h.state)
            return h.stalls >= 2 and h.reconnects >= 2

        wait_until(stalled_and_retried, 60, 0.005, "two stalls and two reconnects")
        health = reader.health()
        assert health.frames == 0 and "no frame from GStreamer pipeline" in health.last_error
    assert {CaptureState.CONNECTING, CaptureState.BACKOFF} <= seen


def test_a_read_that_cannot_be_interrupted_is_reported_as_hung(camera, shm_root):
    cam = camera({"type": "gstreamer", "pipeline": NOTHING}, stall_timeout_s=0.3)
    sources, hung = [], []

    class Unabortable(GStreamerPipe):
        """A real pipeline whose read, like a native camera call, ignores abort()."""

        def abort(self) -> None:
            pass

    def factory():
        sources.append(Unabortable(NOTHING, width=320, height=240, pixel_format="bgr", resize=False))
        return sources[-1]

    with running(cam, shm_root, factory, on_hung=hung.append, hung_after_s=0.5) as (_, reader, _r):
        wait_until(lambda: hung, 30, 0.02, "the hung report")
        assert "cannot be interrupted; exiting so the supervisor restarts capture" in hung[0]
        assert reader.health().state == CaptureState.STALLED
        GStreamerPipe.abort(sources[-1])  # what the process exit does for real: let the thread finish


def test_truncated_file_counts_decode_errors_and_keeps_streaming(camera, truncated_video, shm_root):
    cam = camera({"type": "file", "path": str(truncated_video), "realtime": False})
    with running(cam, shm_root) as (_, reader, _r):
        wait_until(lambda: reader.health().decode_errors >= 2, 60, 0.02, "two decode errors (two passes over the file)")
        h = reader.health()
        assert h.state == CaptureState.STREAMING and h.frames > 2 and h.reconnects == 0


def test_unopenable_file_backs_off_with_growing_delays_and_says_why(camera, tmp_path, shm_root, monkeypatch):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00garbage" * 4000)
    cam = camera({"type": "file", "path": str(junk)}, backoff={"initial_s": 0.05, "max_s": 0.4, "jitter": 0})
    delays: list[float] = []
    real_next_delay = Backoff.next_delay

    def recorded(self: Backoff) -> float:  # the real computation, recorded as the loop asks for it
        delays.append(real_next_delay(self))
        return delays[-1]

    monkeypatch.setattr(Backoff, "next_delay", recorded)
    with running(cam, shm_root) as (loop, reader, _r):
        wait_until(lambda: reader.health().reconnects >= 5, 60, 0.02, "five reconnect attempts")
        h = reader.health()
        assert h.state in (CaptureState.BACKOFF, CaptureState.CONNECTING) and h.frames == 0
        assert "could not open file" in h.last_error and "junk.mp4" in h.last_error
        assert loop._backoff.attempt >= 5
    seen = list(delays)
    assert len(seen) >= 5 and seen == sorted(seen), f"delays decreased: {seen}"
    assert seen[0] == 0.05 and seen[4:] == [0.4] * len(seen[4:]), f"not 0.05 doubling to the 0.4 cap: {seen}"


def test_too_many_decode_errors_in_a_row_reconnect(camera, tmp_path, shm_root):
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / name).write_bytes(b"\xff\xd8 not really a JPEG " * 100)
    cam = camera({"type": "images", "path": str(tmp_path), "realtime": False}, max_decode_errors=3)
    with running(cam, shm_root) as (_, reader, result):
        wait_until(lambda: reader.health().reconnects >= 2, 60, 0.02, "two reconnects after bad reads")
        assert reader.health().state in (CaptureState.BACKOFF, CaptureState.CONNECTING)
    h = result["final"]  # counters read after the loop stopped, so they agree with each other
    # Each connection ended after exactly max_decode_errors bad reads (the last one maybe cut short by the stop).
    assert 3 * h.reconnects <= h.decode_errors <= 3 * (h.reconnects + 1) and h.reconnects >= 2 and h.frames == 0
    assert "3 bad reads in a row" in h.last_error and "is not a readable image" in h.last_error


def capture_intervals(cam, shm_root, count: int = 16) -> list[float]:
    """Stream ``cam`` until ``count`` frames are published; return the gaps between their capture timestamps."""
    times: list[float] = []
    watcher: list[RingReader] = []

    def on_frame() -> None:  # in the loop thread, right after publish: the latest frame is the one just written
        if not watcher:
            watcher.append(RingReader(ring_path(shm_root, cam.id)))
        lease = watcher[0].acquire_latest()
        if lease is not None:
            with lease:
                times.append(lease.meta.t_mono)

    try:
        with running(cam, shm_root, on_frame=on_frame) as (_, _reader, _r):
            wait_until(lambda: len(times) >= count, 60, 0.02, f"{count} frames")
    finally:
        for reader in watcher:
            reader.close()
    return [b - a for a, b in zip(times[: count - 1], times[1:count])]


@pytest.mark.parametrize("kind, fps", [("file", 10), ("file", None), ("images", 10)])
def test_realtime_pacing_never_delivers_faster_than_the_camera_fps(camera, video, images_dir, shm_root, kind, fps):
    # Only lower bounds on the spacing: load can slow capture down, never speed it up.
    source = {"type": kind, "path": str(video if kind == "file" else images_dir)}
    rate = fps or 15  # without a camera fps a file plays at its own rate (the test video's is 15)
    paced = capture_intervals(camera({**source, "realtime": True}, fps=fps, resize=True), shm_root)
    assert statistics.median(paced) >= 0.8 / rate, f"paced at {rate} fps but frames came every {paced}"
    free = capture_intervals(camera({**source, "realtime": False}, resize=True), shm_root)
    # The same source unpaced is far quicker: the spacing above comes from the pacing, not from decoding.
    assert statistics.median(paced) >= 2 * statistics.median(free), f"paced {paced} vs unpaced {free}"


def test_impossible_size_fails_once_with_a_clear_error(camera, video, shm_root):
    cam = camera({"type": "file", "path": str(video)}, width=640, height=360)
    with running(cam, shm_root) as (_, reader, result):
        wait_until(lambda: "state" in result, 30, 0.02, "the loop to give up")
        h = reader.health()
        assert result["state"] == CaptureState.FAILED == h.state and h.reconnects == 0
        assert "delivers 320x240 frames but the camera is configured for 640x360" in h.last_error


@pytest.mark.parametrize("order, pixel", [("bgr", [0, 0, 255]), ("rgb", [255, 0, 0])])
def test_gstreamer_pipeline_through_the_loop(camera, shm_root, order, pixel):
    cam = camera({"type": "gstreamer", "pipeline": "videotestsrc pattern=solid-color foreground-color=0xffff0000"},
                 pixel_format=order)
    with running(cam, shm_root) as (_, reader, _r):
        wait_until(lambda: reader.health().frames >= 5, 30, 0.02, "5 frames")
        with reader.acquire_latest() as lease:
            assert lease.array[0, 0].tolist() == pixel and lease.meta.pixel_format == order


def test_a_file_not_there_yet_is_waited_for_and_streamed_once_it_appears(camera, video, tmp_path, shm_root):
    later = tmp_path / "later.mp4"
    cam = camera({"type": "file", "path": str(later)}, backoff={"initial_s": 0.05, "max_s": 0.2})
    with running(cam, shm_root) as (_, reader, _r):
        wait_until(lambda: reader.health().reconnects >= 3, 30, 0.01, "three looks for the absent file")
        h = reader.health()
        assert h.state == CaptureState.WAITING and h.frames == 0
        assert f"file {later} does not exist" in h.last_error
        # Since when: the first look, not the latest one (each look stays WAITING instead of CONNECTING again).
        assert h.state_age_s >= 0.05 * 2, h
        later.write_bytes(video.read_bytes())  # the file is copied into place
        wait_until(lambda: reader.health().frames >= 5, 30, 0.02, "frames once the file is there")
        assert reader.health().state == CaptureState.STREAMING


def test_a_v4l2_device_that_is_absent_is_waited_for(camera, shm_root):
    cam = camera({"type": "v4l2", "device": "/dev/video97"}, backoff={"initial_s": 0.05, "max_s": 0.1})
    seen = set()
    with running(cam, shm_root) as (_, reader, _r):
        def looked_twice() -> bool:
            h = reader.health()
            seen.add(h.state)
            return h.reconnects >= 2

        wait_until(looked_twice, 30, 0.002, "two looks for /dev/video97")
        h = reader.health()
        assert h.state == CaptureState.WAITING and "V4L2 device /dev/video97 does not exist" in h.last_error
    assert CaptureState.BACKOFF not in seen  # an absent device is waited for, not counted as a failing one
