"""A camera without width/height takes its source's own size, read at start: from a video file, an RTSP
stream and an image folder; the ring is made for it, and the status readings say it. The sizes expected are
what ffmpeg was asked to write, or what ffprobe reads, never what the code under test reports."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.rtsp import make_test_video
from support.wait import wait_until

from appliance.capture import CaptureProcess
from appliance.capture.config import CameraConfig, SizeNotResolved
from appliance.capture.probe import SizeUnknown, probe_size, resolve_sizes, split_by_size
from appliance.harness.rtsp import RtspServer
from appliance.health.metrics import ApplianceMetrics
from appliance.supervisor.latecameras import LateCameras
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
        _ = configured.frame_size
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


def test_a_source_that_cannot_tell_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(SizeUnknown, match="set width and height"):
        resolve_sizes([_sizeless({"type": "file", "path": str(tmp_path / "absent.mp4")})])


def test_a_camera_whose_source_cannot_tell_waits_and_is_handed_over_once_it_answers(tmp_path: Path,
                                                                                    video: Path) -> None:
    later = tmp_path / "later.mp4"
    configs = [_sizeless({"type": "file", "path": str(later)}, backoff={"initial_s": 0.05, "max_s": 0.2}),
               _sizeless({"type": "file", "path": str(video)}).model_copy(update={"id": "Dock-2"})]
    ready, waiting = split_by_size(configs)
    assert [(c.id, c.frame_size) for c in ready] == [("Dock-2", (320, 240))]  # the fixture's ffmpeg size
    assert [c.id for c, _ in waiting] == ["Dock-1"]
    metrics, late = ApplianceMetrics(), LateCameras(waiting)
    late.start(None, metrics)
    try:
        said = late.readings()["Dock-1"]
        assert said["state"] == "waiting", said
        assert said["waiting_for"].startswith(f"size unknown until the source answers (file {later} does not exist")
        wait_until(lambda: 'appliance_camera_waiting{camera="Dock-1"} 1.0' in metrics.render().decode(), 10, 0.05,
                   "the waiting gauge")
        assert late.answered() == [] and len(late) == 1
        shutil.copy(video, tmp_path / "copying.mp4")
        (tmp_path / "copying.mp4").rename(later)  # the video is moved into place
        (camera,) = wait_until(late.answered, 20, 0.05, "Dock-1 handed over once its file is there")
        assert camera.id == "Dock-1" and camera.frame_size == (320, 240) and len(late) == 0
        late.replace(split_by_size([configs[0].model_copy(update={"source": _sizeless(
            {"type": "file", "path": str(tmp_path / "never.mp4")}).source})])[1])  # a reload: waits again
        assert list(late.readings()) == ["Dock-1"]
        late.replace([])  # a reload that drops it ends the wait
        assert late.readings() == {} and late.answered() == []
    finally:
        late.stop()


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
