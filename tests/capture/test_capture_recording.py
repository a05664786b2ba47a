"""Recording with real parts: a spawned capture process reads a real RTSP camera (gst-rtsp-server streaming an
H.264 file) through PyAV, publishes frames to its ring and keeps the packets as MP4 segments; clips are cut from
them and checked with ffprobe and against the ring's own frames (the ground truth of what the camera showed
when). A recording file camera runs through the whole appliance in tests/supervisor/test_supervisor_clips_e2e.py."""

from __future__ import annotations

import shutil

import cv2
import numpy as np
import pytest
from support.recording import decoded_frames, ffprobe_keyframes, ring_frames_while_recording, when_shown
from support.rtsp import make_test_video
from support.wait import wait_until

from appliance.capture.config import CameraConfig
from appliance.capture.packets import PacketFanout
from appliance.capture.recordconfig import RecordConfig, RetainConfig
from appliance.capture.recording.clips import ClipError, covering, write_clip
from appliance.capture.recording.recorder import SegmentRecorder
from appliance.capture.recording.segments import enforce_retention, kept_bytes, list_segments, read_status
from appliance.capture.sources.pyav import AvCapture
from appliance.harness.rtsp import RtspServer

PRE = POST = 2.0
RUN_S = 8.0


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """An RTSP camera recorded for RUN_S seconds: (segments folder, [(t_utc, frame)] as the ring had them)."""
    video = make_test_video(tmp_path_factory.mktemp("rec") / "long.mp4", seconds=30)
    folder = tmp_path_factory.mktemp("recordings") / "cam0"
    server = RtspServer(video).start()
    cam = CameraConfig.model_validate({
        "id": "cam0", "source": {"type": "rtsp", "url": server.url, "open_timeout_s": 5}, "width": 320, "height": 240,
        "record": {"enabled": True, "pre_capture_s": PRE, "post_capture_s": POST, "segment_s": 1, "min_free_gb": 0}})
    frames = ring_frames_while_recording(cam, folder, RUN_S)
    server.stop()
    return folder, frames


def test_a_clip_starts_at_a_keyframe_before_pre_capture_and_ends_after_post_capture(recorded, tmp_path):
    folder, frames = recorded
    event_t, event_frame = frames[len(frames) // 2]
    clip = write_clip(folder, event_t - PRE, event_t + POST, tmp_path / "event.mp4")
    probe = ffprobe_keyframes(clip.path)
    assert probe["frames"][0]["key_frame"] == 1
    assert clip.start <= event_t - PRE and clip.start + float(probe["format"]["duration"]) >= event_t + POST - 0.07
    with open(clip.path, "rb") as f:
        head = f.read(64)
    assert head.index(b"moov") < 64 and b"mdat" not in head  # the index at the front: plays while downloading
    images = decoded_frames(clip.path)
    first_t, first_psnr = when_shown(frames, images[0])
    last_t, last_psnr = when_shown(frames, images[-1])
    assert first_psnr > 30 and last_psnr > 30, (first_psnr, last_psnr)
    assert first_t <= event_t - PRE + 0.07 and last_t >= event_t + POST - 0.07, (first_t - event_t, last_t - event_t)
    # The clip's frame at the event's time is the event's frame.
    index = round((event_t - clip.start) * 15)
    at_event = max(images[max(0, index - 1):index + 2], key=lambda image: cv2.PSNR(image, event_frame))
    assert cv2.PSNR(at_event, event_frame) > 30


def test_overlapping_events_share_the_footage(recorded, tmp_path):
    folder, frames = recorded
    # A second event a second later, or as late as the footage allows (a loaded host shows fewer seconds).
    t1 = frames[len(frames) // 2][0]
    t2 = min(t1 + 1.0, frames[-1][0] - POST)
    assert t2 - t1 > 0.3, "the recording is long enough for two overlapping events"
    a = write_clip(folder, t1 - PRE, t1 + POST, tmp_path / "a.mp4")
    b = write_clip(folder, t2 - PRE, t2 + POST, tmp_path / "b.mp4")
    union = [s for s in list_segments(folder) if s.end > a.start and s.start < b.end]
    assert sum(s.size for s in union) < a.path.stat().st_size + b.path.stat().st_size
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".mp4") == \
        sorted(s.path.name for s in list_segments(folder))  # the folder keeps segments, no copy per event


def test_missing_footage_is_a_clip_error_not_a_short_clip(recorded, tmp_path):
    folder, frames = recorded
    with pytest.raises(ClipError, match="no footage"):
        write_clip(folder, frames[0][0] - 60, frames[0][0], tmp_path / "before.mp4")
    with pytest.raises(ClipError, match="not written yet"):
        write_clip(folder, frames[-1][0], frames[-1][0] + 60, tmp_path / "after.mp4")


def test_retention_removes_the_oldest_segments_first_at_the_size_limit(recorded, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(recorded[0], folder)
    segments = list_segments(folder)
    assert len(segments) >= 3
    limit = sum(s.size for s in segments[-2:]) + 1
    removed = enforce_retention(folder, RetainConfig(days=1, max_gb=limit / 1e9))
    assert [s.path.name for s in removed] == [s.path.name for s in segments[:-2]]
    assert kept_bytes(folder) < limit and [s.path.name for s in list_segments(folder)] == \
        [s.path.name for s in segments[-2:]]


def test_a_full_disk_stops_recording_with_a_reason_never_the_frames(tmp_path):
    video = make_test_video(tmp_path / "v.mp4", seconds=2)
    free_gb = shutil.disk_usage(tmp_path).free / 1e9
    recorder = SegmentRecorder(tmp_path / "rec", RecordConfig(enabled=True, min_free_gb=min(free_gb + 100, 10_000)),
                               "cam0")
    recorder.start()
    source = AvCapture(str(video), packets=PacketFanout([recorder], recorder), is_file=True, loop=True, realtime=False,
                       width=320, height=240, pixel_format="bgr", resize=False)
    source.open()
    out = np.empty((240, 320, 3), np.uint8)
    for _ in range(45):  # past the 2 s file's end: it loops
        source.read_into(out)
    source.close()
    recorder.stop()
    status = wait_until(lambda: read_status(tmp_path / "rec"), 10, message="the recorder's status")
    assert not status.recording and "below record.min_free_gb" in status.reason and "detections go on" in status.reason
    assert list_segments(tmp_path / "rec") == []


def test_a_clip_bound_between_two_segments_takes_the_neighbour_across_the_gap(tmp_path):
    """A segment ends at its last frame and the next opens at its first keyframe, a frame later: a wanted start
    or end inside that gap is covered by the segment across it, not "no footage" or "not written yet"."""
    folder = tmp_path / "cam0"
    folder.mkdir()
    for start_ms, end_ms in ((1_000, 1_998), (2_000, 2_998), (3_000, 3_998)):
        (folder / f"{start_ms}-{end_ms}.mp4").write_bytes(b"")
    assert [s.start for s in covering(folder, 1.999, 2.5)] == [1.0, 2.0]
    assert [s.start for s in covering(folder, 2.5, 2.999)] == [2.0, 3.0]
    assert [s.start for s in covering(folder, 1.5, 3.5)] == [1.0, 2.0, 3.0]
    with pytest.raises(ClipError, match="not written yet"):
        covering(folder, 2.5, 4.5)  # beyond the last segment: nothing across a gap
