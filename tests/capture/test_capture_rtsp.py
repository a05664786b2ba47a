"""Capture from a real RTSP server (gst-rtsp-server on loopback) that dies, comes back, and hangs."""

from __future__ import annotations

import pytest
from support.rtsp import make_test_video
from support.wait import wait_until

from appliance.capture import CaptureProcess, CaptureState
from appliance.harness.rtsp import RtspServer


@pytest.fixture(scope="module")
def long_video(tmp_path_factory):
    """30 s so the stream does not end by itself during a test."""
    return make_test_video(tmp_path_factory.mktemp("rtsp") / "long.mp4", seconds=30)


@pytest.fixture
def server(long_video):
    with RtspServer(long_video) as srv:
        yield srv


def start_capture(camera, server, shm_root, **source):
    cam = camera({"type": "rtsp", "url": server.url, "open_timeout_s": 5, **source})
    proc = CaptureProcess(cam, shm_root=shm_root)
    proc.start()
    return proc


@pytest.mark.slow
def test_capture_resumes_by_itself_when_the_server_is_killed_and_restarted(camera, server, shm_root):
    proc = start_capture(camera, server, shm_root)
    try:
        wait_until(lambda: proc.health().frames >= 10, 60, 0.02, "10 frames from the RTSP server")
        assert proc.health().state == CaptureState.STREAMING
        server.kill()  # the camera loses power mid-stream
        wait_until(lambda: proc.health().state != CaptureState.STREAMING, 60, 0.02,
                   "capture to notice the server is gone")
        wait_until(lambda: proc.health().reconnects >= 1, 60, 0.02, "a reconnect attempt against the dead server")
        assert proc.health().state in (CaptureState.BACKOFF, CaptureState.CONNECTING, CaptureState.STALLED)
        before = proc.health().frames
        server.start()  # the camera comes back on the same address
        wait_until(lambda: proc.health().frames >= before + 10, 90, 0.02, "frames again after the server restart")
        h = proc.health()
        assert h.state == CaptureState.STREAMING and proc.is_alive() and h.generation == 1  # same process recovered
        with proc.reader() as reader, reader.acquire_latest() as lease:
            assert lease.meta.seq > before and lease.array.std() > 10
    finally:
        proc.close()


@pytest.mark.slow
def test_a_server_that_hangs_is_detected_as_stalled(camera, server, shm_root):
    proc = start_capture(camera, server, shm_root)
    try:
        wait_until(lambda: proc.health().frames >= 5, 60, 0.02, "5 frames")
        server.pause()  # SIGSTOP: the TCP connection stays up, nothing flows
        wait_until(lambda: proc.health().stalls >= 1, 60, 0.02, "the stall to be detected")
        assert "no frame from stream" in proc.health().last_error
        server.resume()
        before = proc.health().frames
        wait_until(lambda: proc.health().frames >= before + 5, 90, 0.02, "frames again after the server resumes")
        assert proc.health().state == CaptureState.STREAMING
    finally:
        server.resume()
        proc.close()


@pytest.mark.parametrize("served, other", [("tcp", "udp"), ("udp", "tcp")])
def test_the_configured_transport_is_the_one_used(camera, long_video, shm_root, served, other):
    """A server that allows one transport streams to a camera set to it and refuses the other: FFmpeg, left
    to itself, would fall back from UDP to TCP, so only a restricted server shows which one was asked for."""
    with RtspServer(long_video, protocols=(served,)) as only:
        proc = start_capture(camera, only, shm_root, transport=served)
        try:
            wait_until(lambda: proc.health().frames >= 5, 60, 0.02, f"5 frames over RTP/{served.upper()}")
        finally:
            proc.close()
        proc = start_capture(camera, only, shm_root, transport=other)
        try:
            # Several refused attempts, each a clean open error, and no frame in between.
            wait_until(lambda: proc.health().reconnects >= 2, 60, 0.02, f"two reconnects after {other} was refused")
            h = proc.health()
            assert h.frames == 0 and h.state in (CaptureState.BACKOFF, CaptureState.CONNECTING)
            assert f"could not open stream {only.url} over {other}" in h.last_error
        finally:
            proc.close()


def test_http_stream(camera, long_video, shm_root):
    """An HTTP MPEG-TS stream served by a real ffmpeg (-listen 1: one client), through the rtsp source type."""
    import subprocess

    from support.ports import free_port

    url = f"http://127.0.0.1:{free_port()}/cam.ts"
    server = subprocess.Popen(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-re", "-i", str(long_video), "-c", "copy", "-f", "mpegts",
         "-listen", "1", url],
        stdin=subprocess.DEVNULL,
    )
    cam = camera({"type": "rtsp", "url": url, "open_timeout_s": 5})
    proc = CaptureProcess(cam, shm_root=shm_root)
    try:
        proc.start()
        wait_until(lambda: proc.health().frames >= 5, 60, 0.02, "5 frames over HTTP")
        with proc.reader() as reader, reader.acquire_latest() as lease:
            assert lease.array.std() > 10
    finally:
        proc.close()
        server.kill()
        server.wait()
