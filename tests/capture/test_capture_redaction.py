"""Camera passwords stay out of what a source's native code and child processes print (GStreamer's gst-launch,
FFmpeg inside OpenCV) on its way to the log, the journal, health and MQTT."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from support.ports import free_port
from support.wait import wait_until

from appliance.capture import CameraConfig, CaptureProcess
from appliance.capture.sources import EndOfStream, SourceConfigError, make_source
from appliance.capture.stderrfilter import copy_redacted


def test_lines_are_redacted_whole_however_they_were_written() -> None:
    source_r, source_w = os.pipe()
    sink_r, sink_w = os.pipe()
    for chunk in (b"[tcp] open rtsp://cam:s3", b"cret@10.0.0.5/h264 failed\nlast words, no newline: http://a:b@h"):
        os.write(source_w, chunk)
    os.close(source_w)
    copy_redacted(source_r, sink_w)
    os.close(sink_w)
    with os.fdopen(sink_r, "rb") as sink:
        assert sink.read() == b"[tcp] open rtsp://cam:***@10.0.0.5/h264 failed\nlast words, no newline: http://a:***@h"


def test_gst_launch_output_reaches_the_log_and_the_error_redacted(camera: Callable[..., CameraConfig],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A pipeline that names its camera's URL where a file was meant: gst-launch prints the URL back."""
    source = make_source(camera({"type": "gstreamer", "pipeline": "filesrc location=rtsp://cam:s3cret@10.0.0.5/h264"}))
    source.open()
    try:
        with caplog.at_level(logging.INFO, logger="appliance.capture.sources.gstreamer"):
            with pytest.raises((EndOfStream, SourceConfigError)) as failed:
                source.read_into(np.zeros((240, 320, 3), np.uint8))
    finally:
        source.close()
    assert 'No such file "rtsp://cam:***@10.0.0.5/h264"' in caplog.text  # what it said, for the operator
    assert "s3cret" not in caplog.text and "s3cret" not in str(failed.value)


def test_what_opencv_prints_in_a_capture_process_is_redacted(camera: Callable[..., CameraConfig], shm_root: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    """OPENCV_VIDEOIO_DEBUG=1 (what one sets to debug a camera) makes OpenCV print each URL it opens to stderr
    from native code, past Python's logging."""
    monkeypatch.setenv("OPENCV_VIDEOIO_DEBUG", "1")  # the spawned capture process inherits it
    url = f"rtsp://cam:s3cret@127.0.0.1:{free_port()}/h264"  # nothing listens: each open fails at once
    proc = CaptureProcess(camera({"type": "rtsp", "url": url}, backoff={"initial_s": 0.05, "max_s": 0.1}),
                          shm_root=shm_root)
    try:
        proc.start()
        wait_until(lambda: proc.health().reconnects >= 2, 60, 0.02, "two failed connection attempts")
    finally:
        proc.close()
    err = capfd.readouterr().err
    assert f"trying capture filename='{url.replace('s3cret', '***')}'" in err
    assert "s3cret" not in err
