"""CameraConfig: each source type, strictness, bounds and cross-field checks; machine checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from appliance.capture.check import absent_source, check_camera, check_cameras, ring_bytes
from appliance.capture.config import CameraConfig, FileSource, GStreamerSource, RtspSource, V4l2Source


def cfg(source: dict, **extra) -> CameraConfig:
    return CameraConfig.model_validate({"id": "line1", "source": source, "width": 640, "height": 480, **extra})


def test_each_source_type_parses_to_its_model(tmp_path):
    assert isinstance(cfg({"type": "v4l2", "device": "/dev/video2", "fourcc": "MJPG"}).source, V4l2Source)
    rtsp = cfg({"type": "rtsp", "url": "rtsp://10.0.0.5:554/stream1", "transport": "udp"}).source
    assert isinstance(rtsp, RtspSource) and rtsp.transport == "udp"
    assert isinstance(cfg({"type": "file", "path": str(tmp_path / "a.mp4")}).source, FileSource)
    assert cfg({"type": "images", "path": str(tmp_path)}, fps=5).source.type == "images"
    assert isinstance(cfg({"type": "gstreamer", "pipeline": "videotestsrc"}).source, GStreamerSource)


def test_defaults_are_sane():
    c = cfg({"type": "rtsp", "url": "rtsp://cam/1"})
    assert (c.pixel_format, c.ring_slots, c.resize, c.source.transport) == ("bgr", 4, False, "tcp")
    assert (c.record.enabled, c.record.pre_capture_s, c.record.post_capture_s) == (False, 5.0, 5.0)
    assert c.source.decode_threads == 1


@pytest.mark.parametrize(
    "source, extra, message",
    [
        ({"type": "rtsp", "url": "rtsp://cam/1", "tranport": "tcp"}, {}, "Extra inputs are not permitted"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"fpss": 5}, "Extra inputs are not permitted"),
        ({"type": "usb", "device": "/dev/video0"}, {}, "does not match any of the expected tags"),
        ({"type": "rtsp", "url": "ftp://cam/1"}, {}, "url must start with rtsp://"),
        ({"type": "rtsp", "url": "rtsp://cam/1", "transport": "quic"}, {}, "'tcp' or 'udp'"),
        ({"type": "file", "path": "/v.mp4", "decode_threads": -1}, {}, "greater than or equal to 0"),
        ({"type": "v4l2", "device": "video0"}, {}, "device must be a /dev path"),
        ({"type": "v4l2", "fourcc": "XXXX"}, {}, "Input should be"),
        ({"type": "gstreamer", "pipeline": "videotestsrc ! autovideosink"}, {}, "must not end in a sink"),
        ({"type": "images", "path": "/tmp"}, {}, "needs fps"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"pixel_format": "yuv"}, "'bgr' or 'rgb'"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"width": 0}, "greater than or equal to 16"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"height": 100000}, "less than or equal to 4320"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"ring_slots": 2}, "greater than or equal to 3"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"id": "Cam 1"}, "is not a valid id"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"fps": 2, "stall_timeout_s": 0.4}, "longer than one frame"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"backoff": {"initial_s": 5, "max_s": 1}}, "must be >= initial_s"),
        ({"type": "v4l2"}, {"record": {"enabled": True, "encoder": "x264 --evil"}}, "should match pattern"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"record": {"post_capture_s": -1}}, "greater than or equal to 0"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"record": {"retain": {"max_gb": 0}}}, "greater than 0"),
        ({"type": "rtsp", "url": "rtsp://cam/1"}, {"record": {"retain": {"weeks": 1}}}, "Extra inputs"),
    ],
)
def test_bad_config_gives_a_clear_error(source, extra, message):
    with pytest.raises(ValidationError) as info:
        cfg(source, **extra)
    assert message in str(info.value)


def test_cameras_list_embeds_in_a_parent_model():
    from appliance.config.base import StrictModel

    class Top(StrictModel):
        cameras: list[CameraConfig]

    top = Top.model_validate({"cameras": [{"id": "a", "source": {"type": "rtsp", "url": "rtsp://x/1"}, "width": 32,
                                           "height": 32}]})
    assert top.cameras[0].id == "a"


def test_a_missing_file_folder_or_device_is_an_absent_source_not_a_problem(tmp_path, video):
    absent = [cfg({"type": "file", "path": str(tmp_path / "none.mp4")}),
              cfg({"type": "images", "path": str(tmp_path / "none")}, fps=1),
              cfg({"type": "images", "path": str(tmp_path)}, fps=1),
              cfg({"type": "v4l2", "device": "/dev/video99"})]
    reasons = [absent_source(camera) for camera in absent]
    assert "video file" in reasons[0] and "none.mp4 does not exist now" in reasons[0]
    assert "image folder" in reasons[1] and "does not exist now" in reasons[1]
    assert "has no .jpg/.jpeg/.png/.bmp files now" in reasons[2]
    assert "/dev/video99 does not exist now" in reasons[3]
    assert all("the camera waits for it" in reason for reason in reasons)
    assert [check_camera(camera) for camera in absent] == [[]] * 4
    assert absent_source(cfg({"type": "file", "path": str(video)})) is None


def test_check_gstreamer_needs_gst_launch_on_path(monkeypatch, tmp_path):
    camera = cfg({"type": "gstreamer", "pipeline": "videotestsrc"})
    assert check_camera(camera) == []
    monkeypatch.setenv("PATH", str(tmp_path))  # a real PATH without gst-launch-1.0
    assert "needs gst-launch-1.0" in check_camera(camera)[0]


def test_check_cameras_duplicate_ids_and_shm_space(shm_root, video):
    small = cfg({"type": "file", "path": str(video)})
    assert check_cameras([small], shm_root) == []
    assert "used twice" in check_cameras([small, small], shm_root)[0]
    import os

    st = os.statvfs(shm_root)
    free = st.f_bavail * st.f_frsize
    big = dict(source={"type": "file", "path": str(video)}, width=7680, height=4320, ring_slots=64)
    count = free // ring_bytes(cfg(**big)) + 1  # just enough 8K cameras to overflow the real /dev/shm
    cameras = [CameraConfig.model_validate({"id": f"c{i}", **big}) for i in range(count)]
    (problem,) = check_cameras(cameras, shm_root)
    needed = count * ring_bytes(cameras[0])
    assert f"rings need {needed / 2**20:.1f} MiB in {shm_root} but only" in problem
    assert f"c0: {ring_bytes(cameras[0]) / 2**20:.1f} MiB" in problem
