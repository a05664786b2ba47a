"""Recording a raw camera with real parts: a spawned capture process runs a GStreamer ``videotestsrc`` pipeline
(raw frames, nothing compressed to keep), encodes the frames it publishes with the CPU's H.264 encoder into the
same MP4 segments the compressed sources use, and a clip is cut around an event time; the ring's own frames are
the ground truth of what was shown when. A broken encoder stops recording with a reason, never the frames."""

from __future__ import annotations

import pytest
from support.recording import decoded_frames, ffprobe_keyframes, ring_frames_while_recording, when_shown
from support.wait import wait_until

from appliance.capture.config import CameraConfig
from appliance.capture.recording.clips import write_clip
from appliance.capture.recording.segments import list_segments, read_status

PRE = POST = 1.5
RUN_S = 7.0
PIPELINE = "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,framerate=15/1"


def _camera(encoder: str = "auto") -> CameraConfig:
    return CameraConfig.model_validate({
        "id": "raw0", "source": {"type": "gstreamer", "pipeline": PIPELINE}, "width": 320, "height": 240,
        "record": {"enabled": True, "pre_capture_s": PRE, "post_capture_s": POST, "segment_s": 1, "min_free_gb": 0,
                   "encoder": encoder}})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recordings") / "raw0"
    return folder, ring_frames_while_recording(_camera(), folder, RUN_S)


def test_a_raw_camera_is_encoded_into_segments_and_clips(recorded, tmp_path):
    folder, frames = recorded
    segments = list_segments(folder)
    assert len(segments) >= 3, segments
    status = read_status(folder)
    assert status is not None and status.recording, status
    # An event after the first segment (a live camera's ring starts before the encoder's first keyframe), with its
    # post-capture inside what was written (a loaded host encodes fewer seconds of the run).
    event_t = min(segments[0].end + PRE + 0.2, segments[-1].end - POST)
    assert event_t - PRE >= segments[0].start, ("too little footage for a clip", segments)
    clip = write_clip(folder, event_t - PRE, event_t + POST, tmp_path / "event.mp4")
    probe = ffprobe_keyframes(clip.path)
    assert probe["frames"][0]["key_frame"] == 1
    duration = float(probe["format"]["duration"])
    # Keyframes every second: the clip starts at most ~1 s before the wanted start, and reaches past the end.
    assert event_t - PRE - 1.2 <= clip.start <= event_t - PRE, (clip.start - event_t)
    assert clip.start + duration >= event_t + POST - 0.1, (clip.start + duration - event_t)
    images = decoded_frames(clip.path)
    first_t, first_psnr = when_shown(frames, images[0])
    last_t, last_psnr = when_shown(frames, images[-1])
    assert first_psnr > 30 and last_psnr > 30, (first_psnr, last_psnr)
    # The clip's first and last frames are the ring's frames shown at the clip's own start and end.
    assert abs(first_t - clip.start) < 0.15 and abs(last_t - (clip.start + duration)) < 0.3, \
        (first_t - clip.start, last_t - clip.start - duration)


def test_a_broken_encoder_stops_recording_with_a_reason_never_the_frames(tmp_path):
    folder = tmp_path / "raw0"
    frames = ring_frames_while_recording(_camera("no_such_encoder"), folder, 3.0)
    assert len(frames) >= 20, len(frames)  # 15 fps offered for 3 s: the ring keeps getting frames
    status = wait_until(lambda: read_status(folder), 5, message="the recorder's status")
    assert not status.recording and "no_such_encoder" in status.reason, status
    assert list_segments(folder) == []
