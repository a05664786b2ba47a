"""The passthrough /<camera>: a real capture process reading an H.264 (or H.265) file sends its own packets to the
real RTSP server only while a client watches, and the client gets the file's stream (its profile and size, not the
restream encoder's constrained-baseline at the ring's size), decodable, with no encoder started; /healthz's and
/metrics' readings say passthrough. The fallback (a camera whose codec is not H.264/H.265, vtest.avi's MPEG-4) is
exercised by tests/web/test_web_page.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from support.ports import free_port
from support.rtspclients import frames_of, probe, start_grab
from support.shm import private_shm_dir
from support.wait import wait_until

from appliance.capture import CaptureProcess
from appliance.capture.config import CameraConfig
from appliance.health.metrics import ApplianceMetrics
from appliance.restream.config import RestreamConfig
from appliance.restream.server import RestreamServer
from appliance.restream.tap import Restream

SOURCE_W, SOURCE_H, RING_W, RING_H = 352, 288, 320, 240


# codec -> (FFmpeg's encoder and options, ffprobe's codec and profile): not what the restream's x264 would make
SOURCES = {"h264": (["libx264", "-preset", "veryfast", "-profile:v", "high", "-bf", "0", "-g", "10"], ("h264", "High")),
           "hevc": (["libx265", "-preset", "ultrafast", "-x265-params", "bframes=0:keyint=10:log-level=error",
                     "-tag:v", "hvc1"], ("hevc", "Main"))}


def _source_video(path: Path, codec: str) -> Path:
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc=size={SOURCE_W}x{SOURCE_H}:rate=10", "-t", "20", "-c:v", *SOURCES[codec][0],
                    "-pix_fmt", "yuv420p", str(path)], check=True, timeout=120)
    return path


@pytest.mark.parametrize("codec", list(SOURCES))
def test_a_compressed_camera_is_restreamed_as_its_own_packets_only_while_watched(tmp_path: Path, codec: str) -> None:
    video = _source_video(tmp_path / "source.mp4", codec)
    shm = private_shm_dir()
    root = next(shm)
    packets = root / "restream.sock"
    server = RestreamServer(RestreamConfig(enabled=True, port=free_port(), fps=10), "127.0.0.1", ["cam"], None,
                            packets=packets, passthrough=["cam"]).start()
    tap = Restream(server, {})
    cam = CameraConfig.model_validate({"id": "cam", "source": {"type": "file", "path": str(video), "loop": True},
                                       "width": RING_W, "height": RING_H, "resize": True})
    try:
        with CaptureProcess(cam, shm_root=root, restream_socket=packets) as proc:
            proc.start()
            time.sleep(1.0)  # the capture process connected and said its codec; nobody watches
            assert server.watched == {}
            url = f"rtsp://127.0.0.1:{server.port}/cam"
            stream, times = probe(url, seconds=3)
            assert (stream["codec_name"], stream["profile"]) == SOURCES[codec][1], stream
            assert (stream["width"], stream["height"]) == (SOURCE_W, SOURCE_H)  # the file's, not the ring's
            assert len(set(times)) >= 15  # ~10 frames a second came through
            grab = start_grab(url, 10)
            wait_until(lambda: "passthrough" in server.watched.get("cam", ()), 30, 0.05, "the passthrough client")
            assert tap.readings()["cameras"]["cam"] == {"/cam": "passthrough", "/cam/annotated": None}  # /healthz
            metrics = ApplianceMetrics()
            metrics.record_restream(tap.readings())
            sample = metrics.registry.get_sample_value
            assert sample("appliance_restream_watched", {"camera": "cam", "mount": "/cam"}) == 1
            assert sample("appliance_restream_encoding", {"camera": "cam", "mount": "/cam", "encoder": "x264"}) == 0
            frames = frames_of(grab, SOURCE_W, SOURCE_H)
            assert len(frames) == 10 and frames.std() > 20  # decoded testsrc bars, not a gray failure
            assert server.encoders_started == 0  # no encoder ran for /cam
            wait_until(lambda: server.watched == {}, 30, 0.1, "the packets to stop once the clients left")
            proc.stop()
    finally:
        tap.stop()
        for _ in shm:
            pass
