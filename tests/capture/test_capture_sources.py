"""Frame sources on real inputs: ffmpeg-made videos, darknet images, GStreamer pipelines, absent devices."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from support.ports import free_port

from appliance.capture.sources import DecodeError, EndOfStream, SourceConfigError, SourceError, make_source
from appliance.config.redact import redact_credentials


def frame(shape=(240, 320)) -> np.ndarray:
    return np.zeros((*shape, 3), np.uint8)


def opened(config):
    source = make_source(config)
    source.open()
    return source


def test_file_source_reads_every_frame_then_loops_to_the_first(camera, video):
    source = opened(camera({"type": "file", "path": str(video)}))
    try:
        first, out = frame(), frame()
        source.read_into(first)
        assert source.native_fps == pytest.approx(15)
        for _ in range(59):
            source.read_into(out)
        assert not np.array_equal(out, first)  # testsrc moves
        source.read_into(out)  # frame 61 is frame 1 again
        assert np.array_equal(out, first)
    finally:
        source.close()


@pytest.mark.parametrize("threads", [None, 2, 0])
def test_ffmpeg_decodes_in_the_capture_thread_unless_told_otherwise(camera, video, threads):
    """OpenCV's own default is a decoder thread per core, and each frame thread holds a frame back; the source
    asks for the configured count (1 by default; 0 leaves OpenCV's default)."""
    extra = {} if threads is None else {"decode_threads": threads}
    source = opened(camera({"type": "file", "path": str(video), **extra}))
    try:
        source.read_into(frame())
        plain = cv2.VideoCapture(str(video), cv2.CAP_FFMPEG)  # OpenCV's own choice, asked of OpenCV itself
        expected = {None: 1, 2: 2, 0: plain.get(cv2.CAP_PROP_N_THREADS)}[threads]
        plain.release()
        assert source._cap.get(cv2.CAP_PROP_N_THREADS) == expected
    finally:
        source.close()


def test_pyav_source_decodes_with_the_configured_threads(video):
    from appliance.capture.sources.pyav import AvCapture

    for threads, kind in ((1, "SLICE"), (2, "AUTO")):
        source = AvCapture(str(video), packets=None, is_file=True, decode_threads=threads, width=320, height=240,
                           pixel_format="bgr", resize=False)
        source.open()
        try:
            source.read_into(frame())
            codec = source._container.streams.video[0].codec_context
            assert (codec.thread_count, codec.thread_type.name) == (threads, kind)
        finally:
            source.close()


def test_file_source_without_loop_ends(camera, video):
    source = opened(camera({"type": "file", "path": str(video), "loop": False}))
    out = frame()
    for _ in range(60):
        source.read_into(out)
    with pytest.raises(EndOfStream, match="ended after 60 frames"):
        source.read_into(out)
    source.close()


def test_rgb_pixel_order_is_the_reverse_of_bgr(camera, video):
    bgr, rgb = frame(), frame()
    for out, order in ((bgr, "bgr"), (rgb, "rgb")):
        source = opened(camera({"type": "file", "path": str(video)}, pixel_format=order))
        source.read_into(out)
        source.close()
    assert bgr.std() > 10 and np.array_equal(rgb, bgr[..., ::-1])


def test_file_of_another_size_is_a_config_error_unless_resize(camera, video):
    source = opened(camera({"type": "file", "path": str(video)}, width=640, height=480))
    with pytest.raises(SourceConfigError, match="delivers 320x240 frames but the camera is configured for 640x480"):
        source.read_into(frame((480, 640)))
    source.close()
    source = opened(camera({"type": "file", "path": str(video)}, width=640, height=480, resize=True))
    out = frame((480, 640))
    source.read_into(out)
    assert out.std() > 10
    source.close()


def test_truncated_file_reports_a_decode_error_then_starts_over(camera, truncated_video, video):
    source = opened(camera({"type": "file", "path": str(truncated_video)}))
    out, first = frame(), frame()
    source.read_into(first)
    frames = 1
    with pytest.raises(DecodeError, match=r"read failed at frame \d+ of 60: truncated or corrupt"):
        while True:
            source.read_into(out)
            frames += 1
    assert 1 <= frames < 60
    source.read_into(out)  # the next read starts again from the top
    assert np.array_equal(out, first)
    source.close()


def test_garbage_and_missing_files_cannot_be_opened(camera, tmp_path):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8).tobytes())
    with pytest.raises(SourceError, match="could not open file .*junk.mp4: corrupt"):
        opened(camera({"type": "file", "path": str(junk)}))
    with pytest.raises(SourceError, match="does not exist"):
        opened(camera({"type": "file", "path": str(tmp_path / "missing.mp4")}))


def test_image_folder_resized_in_name_order_and_looping(camera, images_dir):
    source = opened(camera({"type": "images", "path": str(images_dir), "realtime": False}, resize=True))
    dog = cv2.resize(cv2.imread(str(images_dir / "dog.jpg")), (320, 240), interpolation=cv2.INTER_AREA)
    out = frame()
    source.read_into(out)
    assert np.array_equal(out, dog)
    for _ in range(3):  # horses, person, then dog again
        source.read_into(out)
    assert np.array_equal(out, dog)
    source.close()


def test_image_folder_in_rgb(camera, images_dir):
    source = opened(camera({"type": "images", "path": str(images_dir), "realtime": False}, resize=True,
                           pixel_format="rgb"))
    out = frame()
    source.read_into(out)
    dog = cv2.resize(cv2.imread(str(images_dir / "dog.jpg")), (320, 240), interpolation=cv2.INTER_AREA)
    assert np.array_equal(out, dog[..., ::-1])
    source.close()


def test_image_of_another_size_without_resize_is_a_config_error(camera, images_dir):
    source = opened(camera({"type": "images", "path": str(images_dir), "realtime": False}))
    with pytest.raises(SourceConfigError,
                       match="image .*dog.jpg delivers 768x576 frames .* configured for 320x240; .*resize: true"):
        source.read_into(frame())
    source.close()


def test_image_folder_problems(camera, tmp_path):
    with pytest.raises(SourceError, match="has no .*jpg"):
        opened(camera({"type": "images", "path": str(tmp_path), "realtime": False}))
    with pytest.raises(SourceError, match="does not exist"):
        opened(camera({"type": "images", "path": str(tmp_path / "none"), "realtime": False}))
    (tmp_path / "a.jpg").write_bytes(b"not a jpeg")
    source = opened(camera({"type": "images", "path": str(tmp_path), "realtime": False, "loop": False}))
    with pytest.raises(DecodeError, match="a.jpg is not a readable image"):
        source.read_into(frame())
    with pytest.raises(EndOfStream, match="all 1 images shown"):
        source.read_into(frame())
    source.close()


RED = "videotestsrc num-buffers=3 pattern=solid-color foreground-color=0xffff0000"


@pytest.mark.parametrize("order, pixel", [("bgr", [0, 0, 255]), ("rgb", [255, 0, 0])])
def test_gstreamer_pipeline_frames_in_the_asked_order_then_end(camera, order, pixel):
    source = opened(camera({"type": "gstreamer", "pipeline": RED}, pixel_format=order))
    out = frame()
    try:
        for _ in range(3):
            out[...] = 0
            source.read_into(out)
            assert out[120, 160].tolist() == pixel and np.ptp(out.reshape(-1, 3), axis=0).max() == 0
        with pytest.raises(EndOfStream, match="ended"):
            source.read_into(out)
    finally:
        source.close()


def test_gstreamer_impossible_size_is_a_config_error_unless_resize(camera):
    pipeline = f"{RED} ! video/x-raw,width=640,height=480"
    source = opened(camera({"type": "gstreamer", "pipeline": pipeline}))
    with pytest.raises(SourceConfigError, match="cannot deliver 320x240 BGR .*resize: true.*can.t handle caps"):
        source.read_into(frame())
    source.close()
    source = opened(camera({"type": "gstreamer", "pipeline": pipeline}, resize=True))
    out = frame()
    source.read_into(out)
    assert out[0, 0].tolist() == [0, 0, 255]
    source.close()


def test_gstreamer_unknown_element_is_a_config_error(camera):
    source = opened(camera({"type": "gstreamer", "pipeline": "nosuchelement0 ! videoconvert"}))
    with pytest.raises(SourceConfigError, match="no element"):
        source.read_into(frame())
    source.close()


def test_gstreamer_abort_breaks_a_blocked_read(camera):
    import threading

    source = opened(camera({"type": "gstreamer", "pipeline": "videotestsrc is-live=true ! valve drop=true"}))
    timer = threading.Timer(0.5, source.abort)
    timer.start()
    with pytest.raises(EndOfStream):
        source.read_into(frame())  # the pipeline delivers nothing; only abort() can end this read
    timer.join()
    source.close()


def test_absent_v4l2_device_and_unreachable_stream_are_retryable_errors(camera):
    with pytest.raises(SourceError, match="/dev/video63 does not exist") as info:
        opened(camera({"type": "v4l2", "device": "/dev/video63"}))
    assert not isinstance(info.value, SourceConfigError)
    with pytest.raises(SourceError, match="could not open V4L2 device /dev/null"):
        opened(camera({"type": "v4l2", "device": "/dev/null"}))
    url = f"rtsp://127.0.0.1:{free_port()}/cam"
    with pytest.raises(SourceError, match=f"could not open stream {url} over tcp"):
        opened(camera({"type": "rtsp", "url": url, "open_timeout_s": 2}))


class DriverChoice:
    """Stand-in for cv2.VideoCapture on a V4L2 node: takes every set() and reports back the mode the driver chose.
    The one fake in these tests, because this host has no V4L2 camera; it only replaces the device."""

    def __init__(self, width: int, height: int, fourcc: str) -> None:
        self.chosen = {
            cv2.CAP_PROP_FRAME_WIDTH: width,
            cv2.CAP_PROP_FRAME_HEIGHT: height,
            cv2.CAP_PROP_FOURCC: cv2.VideoWriter_fourcc(*fourcc),
        }
        self.asked: dict[int, float] = {}
        self.released = False

    def __call__(self, device: str, api: int) -> "DriverChoice":  # cv2.VideoCapture(device, cv2.CAP_V4L2)
        assert api == cv2.CAP_V4L2
        return self

    def isOpened(self) -> bool:
        return True

    def set(self, prop: int, value: float) -> bool:
        self.asked[prop] = value
        return True

    def get(self, prop: int) -> float:
        return float(self.chosen.get(prop, self.asked.get(prop, 0)))

    def release(self) -> None:
        self.released = True


V4L2 = {"type": "v4l2", "device": "/dev/null", "fourcc": "MJPG"}  # /dev/null: a node that exists


@pytest.mark.parametrize(
    "chosen, problem",
    [
        ((640, 480, "MJPG"), "does not support 320x240 (it chose 640x480);"),
        ((320, 240, "YUYV"), "does not support format MJPG (it chose 'YUYV');"),
        ((640, 480, "YUYV"), "does not support 320x240 (it chose 640x480) and format MJPG (it chose 'YUYV');"),
    ],
)
def test_v4l2_mode_the_camera_did_not_accept_is_a_config_error(camera, monkeypatch, chosen, problem):
    driver = DriverChoice(*chosen)
    monkeypatch.setattr(cv2, "VideoCapture", driver)
    with pytest.raises(SourceConfigError) as info:
        opened(camera(V4L2, fps=30))
    message = str(info.value)
    assert message.startswith("V4L2 device /dev/null ") and problem in message
    assert "list its modes with `v4l2-ctl -d /dev/null --list-formats-ext`" in message
    assert driver.released  # a config error is not retried: nothing else would close the device
    assert driver.asked == {  # what was asked is what the config says
        cv2.CAP_PROP_FOURCC: cv2.VideoWriter_fourcc(*"MJPG"),
        cv2.CAP_PROP_FRAME_WIDTH: 320,
        cv2.CAP_PROP_FRAME_HEIGHT: 240,
        cv2.CAP_PROP_FPS: 30,
    }


@pytest.mark.parametrize(
    "chosen, overrides",
    [((320, 240, "MJPG"), {}), ((640, 480, "MJPG"), {"resize": True})],  # resize: another size is scaled later
)
def test_v4l2_mode_the_camera_accepted_opens_cleanly(camera, monkeypatch, chosen, overrides):
    driver = DriverChoice(*chosen)
    monkeypatch.setattr(cv2, "VideoCapture", driver)
    source = opened(camera(V4L2, **overrides))
    assert not driver.released and cv2.CAP_PROP_FPS not in driver.asked  # no fps configured: none asked
    source.close()
    assert driver.released


def test_passwords_are_redacted_in_messages():
    assert redact_credentials("rtsp://admin:s3cret@10.0.0.5/h264") == "rtsp://admin:***@10.0.0.5/h264"
    assert redact_credentials("rtsp://10.0.0.5/h264") == "rtsp://10.0.0.5/h264"
    assert redact_credentials("rtsp://admin:p@ss:w0rd@10.0.0.5:554/h264") == "rtsp://admin:***@10.0.0.5:554/h264"
    assert redact_credentials("rtsp://admin@10.0.0.5/h264") == "rtsp://admin@10.0.0.5/h264"  # no password


def test_camera_passwords_stay_out_of_source_descriptions_and_config_errors(camera):
    """A GStreamer pipeline embeds its RTSP URL; the description goes to the log and the camera status."""
    from pydantic import ValidationError

    from appliance.capture.config import RtspSource

    pipeline = "rtspsrc location=rtsp://cam:s3cret@10.0.0.5:554/h264 latency=0 ! rtph264depay ! avdec_h264"
    source = make_source(camera({"type": "gstreamer", "pipeline": pipeline}))
    assert "s3cret" not in source.describe()
    assert "rtsp://cam:***@10.0.0.5:554/h264 latency=0" in source.describe()
    assert "s3cret" not in make_source(camera({"type": "rtsp", "url": "rtsp://cam:s3cret@10.0.0.5/h264"})).describe()
    with pytest.raises(ValidationError) as error:
        RtspSource.model_validate({"type": "rtsp", "url": "rtps://cam:s3cret@10.0.0.5/h264"})  # a typo
    message = error.value.errors()[0]["msg"]  # what check-config prints (pydantic's own str adds the input)
    assert "s3cret" not in message and "rtps://cam:***@10.0.0.5/h264" in message
