"""A camera's ``record:`` section: keep its footage, so every event gets the seconds before and after it.

Names as Frigate's (``pre_capture``/``post_capture``/``retain``), in seconds and gigabytes. What runs where:
docs/capture.md, "Recording and event clips".
"""

from __future__ import annotations

from pydantic import Field

from appliance.config.base import StrictModel


class RetainConfig(StrictModel):
    """How long kept footage stays: whichever limit is reached first removes the oldest segments."""

    days: float = Field(3.0, gt=0, le=365, description="remove footage older than this many days")
    max_gb: float = Field(10.0, gt=0, le=100_000, description="this camera's footage on disk stays below this "
                          "many gigabytes (10^9 bytes); the oldest segments go first")


class RecordConfig(StrictModel):
    """Recording of one camera's footage, cut into short segments on the state dir's disk; an event's clip is
    a view over them. A file or RTSP camera keeps its own compressed stream (no re-encode); a raw camera
    (v4l2, images, gstreamer) is encoded to H.264 from the frames it already delivers."""

    enabled: bool = Field(False, description="keep this camera's footage and give every event a clip")
    pre_capture_s: float = Field(5.0, ge=0, le=60, description="seconds of footage before the event (a clip "
                                 "starts at the keyframe at or before event time minus this)")
    post_capture_s: float = Field(5.0, ge=0, le=300, description="seconds of footage after the event")
    segment_s: float = Field(4.0, ge=0.5, le=60, description="a segment is cut at the first keyframe after this "
                             "many seconds; a clip is complete once the segment holding its end is closed")
    min_free_gb: float = Field(1.0, ge=0, le=10_000, description="recording stops (with a reason, detections go "
                               "on) while the state dir's disk has less free space than this")
    encoder: str = Field("auto", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_]+$",
                         description="H.264 encoder of a raw camera (ignored for file/rtsp): auto (nvv4l2h264enc "
                         "on a Jetson that has it, else libx264 or libopenh264), an FFmpeg encoder name "
                         "(libx264, libopenh264) or a GStreamer element (nvv4l2h264enc, x264enc)")
    retain: RetainConfig = Field(default_factory=RetainConfig)
