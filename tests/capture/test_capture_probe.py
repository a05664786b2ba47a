"""A camera without width/height takes its source's own size, read at start: from a video file, an RTSP
stream and an image folder; the ring is made for it, and the status readings say it. The sizes expected are
what ffmpeg was asked to write, or what ffprobe reads, never what the code under test reports."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.rtsp import make_test_video
from support.wait import wait_until

from appliance.capture import CaptureProcess
from appliance.capture.config import CameraConfig, SizeNotResolved
from appliance.capture.probe import SizeUnknown, probe_size, resolve_sizes
from appliance.harness.rtsp import RtspServer
from appliance.supervisor.reporting import capture_readings


def _sizeless(source: dict, **extra: object) -> CameraConfig:
    return CameraConfig.model_validate({"id": "Dock-1", "source": source, "stall_timeout_s": 3.0, **extra})


def _ffprobe_size(path: Path) -> tuple[int, int]:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=width,height", "-of", "json", str(path)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    stream = json.loads(out)["streams"][0]
    return stream["width"], stream["height"]


def test_a_file_an_rtsp_stream_and_an_image_folder_tell_their_size(video: Path, images_dir: Path,
                                                                     tmp_path: Path) -> None:
    assert probe_size(_sizeless({"type": "file", "path": str(video)})) == (320, 240)  # the fixture's ffmpeg size
    first = sorted(images_dir.iterdir())[0]
    assert probe_size(_sizeless({"type": "images", "path": str(images_dir)}, fps=2)) == _ffprobe_size(first)
    stream = make_test_video(tmp_path / "cam.mp4", width=352, height=288, seconds=2)
    with RtspServer(stream) as server:
        assert probe_size(_sizeless({"type": "rtsp", "url": server.url})) == (352, 288)


def test_the_ring_is_made_for_the_probed_size_and_status_says_it(video: Path, shm_root: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    configured = _sizeless({"type": "file", "path": str(video)}, fps=15)
    with pytest.raises(SizeNotResolved):
        configured.frame_size
    with caplog.at_level(logging.INFO, logger="appliance.capture.probe"):
        (camera,) = resolve_sizes([configured])
    assert camera.frame_size == (320, 240)
    assert "camera 'Dock-1': 320x240, the size its source delivers" in caplog.text
    proc = CaptureProcess(camera, shm_root=shm_root)
    try:
        proc.start()
        with proc.reader() as reader:
            lease = wait_until(lambda: reader.acquire_latest(), 60, 0.02, "a frame")
            with lease:
                assert lease.array.shape == (240, 320, 3)
            assert capture_readings(reader.health())["size"] == "320x240"
    finally:
        proc.close()


def test_a_source_that_cannot_tell_fails_the_start_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(SizeUnknown, match="set width and height"):
        resolve_sizes([_sizeless({"type": "file", "path": str(tmp_path / "absent.mp4")})])


@pytest.mark.parametrize("extra, message", [
    ({"width": 640}, "give width and height together"),
    ({"source": {"type": "gstreamer", "pipeline": "videotestsrc"}}, "a gstreamer source needs width and height"),
    ({"analytics": {"lines": [{"name": "door", "a": [10, 10], "b": [10, 100], "in_side": "left"}]}},
     "'door' use pixel points, which need the frame size"),
])
def test_what_a_sizeless_camera_cannot_do_is_refused(extra: dict, message: str) -> None:
    data = {"id": "cam", "source": {"type": "rtsp", "url": "rtsp://10.0.0.7/stream"}, **extra}
    with pytest.raises(ValidationError, match=message):
        CameraConfig.model_validate(data)
