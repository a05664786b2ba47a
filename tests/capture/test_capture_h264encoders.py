"""Which H.264 encoder records a raw camera: probed like the detector's runtime (a Jetson by its
``/etc/nv_tegra_release``, then NVENC's device node and the GStreamer element, checked with the real
gst-inspect), falling back to the CPU with a log line; a GStreamer encoder that cannot run falls back for good."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np

from appliance.capture.h264encoders import H264Encoder, choose_h264_encoder
from appliance.capture.recordconfig import RecordConfig
from appliance.capture.recording.encoder import make_frame_encoder
from appliance.capture.recording.recorder import SegmentRecorder
from appliance.capture.recording.segments import list_segments

CPU = H264Encoder("pyav", "libx264")


def _jetson(root: Path, *, nvenc: bool) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "nv_tegra_release").write_text("# R36 (release), REVISION: 4.0, GCID: 1, BOARD: generic\n")
    if nvenc:
        (root / "dev").mkdir()
        (root / "dev" / "nvhost-msenc").touch()
    return root


def test_a_host_that_is_no_jetson_encodes_on_the_cpu(tmp_path: Path) -> None:
    assert choose_h264_encoder(tmp_path) == CPU


def test_a_jetson_with_nvenc_and_the_element_encodes_through_gstreamer(tmp_path: Path) -> None:
    # x264enc stands in for nvv4l2h264enc, which only a Jetson has: the same probe, a real element.
    assert choose_h264_encoder(_jetson(tmp_path, nvenc=True), element="x264enc") == H264Encoder("gstreamer", "x264enc")


def test_a_jetson_without_the_element_or_nvenc_falls_back_with_a_log_line(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        assert choose_h264_encoder(_jetson(tmp_path / "a", nvenc=True), element="nvv4l2h264enc_absent") == CPU
        assert choose_h264_encoder(_jetson(tmp_path / "b", nvenc=False), element="x264enc") == CPU
    assert "without the GStreamer element nvv4l2h264enc_absent" in caplog.text
    assert "without NVENC (no /dev/nvhost-msenc" in caplog.text


def test_a_gstreamer_encoder_that_cannot_run_falls_back_to_the_cpu(tmp_path: Path, caplog) -> None:
    recorder = SegmentRecorder(tmp_path, RecordConfig(enabled=True, segment_s=0.5, min_free_gb=0), "cam")
    recorder.start()
    encoder = make_frame_encoder(recorder, H264Encoder("gstreamer", "no_such_element"), "bgr", 10.0, "cam")
    encoder.start()
    rng = np.random.default_rng(0)
    with caplog.at_level(logging.WARNING):
        for _ in range(30):
            encoder.offer(rng.integers(0, 255, (120, 160, 3), np.uint8), time.time())
            time.sleep(0.1)
        encoder.stop()
        recorder.stop()
    assert "GStreamer no_such_element failed before its first packet" in caplog.text
    assert "encoding with PyAV libx264 instead" in caplog.text
    assert len(list_segments(tmp_path)) >= 2


def test_the_gstreamer_encoder_path_writes_playable_segments(tmp_path: Path) -> None:
    """The Jetson's path (frames into a gst-launch child, access units back) with x264enc in NVENC's place."""
    import av

    recorder = SegmentRecorder(tmp_path, RecordConfig(enabled=True, segment_s=0.5, min_free_gb=0), "cam")
    recorder.start()
    encoder = make_frame_encoder(recorder, H264Encoder("gstreamer", "x264enc"), "bgr", 10.0, "cam")
    encoder.start()
    frames = [np.full((120, 160, 3), 8 * n, np.uint8) for n in range(25)]
    for frame in frames:
        encoder.offer(frame, time.time())
        time.sleep(0.1)
    encoder.stop()
    recorder.stop()
    segments = list_segments(tmp_path)
    assert len(segments) >= 2 and encoder.describe == "GStreamer x264enc"  # no fallback taken
    with av.open(str(segments[0].path)) as container:
        decoded = [(f.key_frame, f.to_ndarray(format="bgr24")) for f in container.decode(video=0)]
    assert decoded[0][0] and len(decoded) >= 4
    # Each decoded frame is one of the frames given, in order (grey levels 8 apart; H.264 keeps them within 3).
    levels = [round(float(image.mean()) / 8) for _, image in decoded]
    assert levels == list(range(levels[0], levels[0] + len(levels))), levels


def test_an_encoder_that_is_behind_drops_frames_and_counts_them_never_blocking(tmp_path: Path) -> None:
    from appliance.capture.recording.encoder import QUEUE_FRAMES, AvH264, FrameEncoder

    gate = threading.Event()

    class Stuck(AvH264):  # the real encoder behind a gate: a disk or CPU that stalls
        def encode(self, frame, wall, key):
            gate.wait(30)
            return super().encode(frame, wall, key)

    recorder = SegmentRecorder(tmp_path, RecordConfig(enabled=True, min_free_gb=0), "cam")
    recorder.start()
    encoder = FrameEncoder(recorder, lambda w, h: Stuck("libx264", w, h, "bgr"), "cam", "stuck libx264")
    encoder.start()
    frame = np.zeros((120, 160, 3), np.uint8)
    for _ in range(100):
        encoder.offer(frame, time.time())  # returns at once although the encoder waits
    assert 100 - QUEUE_FRAMES - 1 <= encoder.dropped <= 100 - QUEUE_FRAMES, encoder.dropped
    gate.set()
    encoder.stop()
    recorder.stop()
    assert encoder.encoded + encoder.dropped == 100
