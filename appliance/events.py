"""One analytics event, from the tracker to the MQTT encoder, the OPC UA mirror and the page's feed.

``appliance.analytics.events.Analytics`` makes it; the event stage adds the snapshot and the clip that prove it
(``dataclasses.replace``); ``appliance.mqtt.messages.event_payload`` writes it as the ``event`` payload. It
checks its fields on construction, so a bad value fails in the code that made it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Optional

EventType = Literal["enter", "exit", "cross", "dwell"]


@dataclass(frozen=True)
class ClipPlan:
    """An event's clip as planned when the event is sent: its URL path on the health port and the footage it
    will cover (event time - pre_capture to event time + post_capture; it starts at the keyframe before)."""

    url: str
    start: float
    end: float


@dataclass(frozen=True)
class Event:
    """One analytics event of a camera. ``seq`` numbers the camera's events from 1 without gaps (within the
    publisher's boot_id); ``box`` is the object's xyxy box in the triggering frame, whose size is
    ``image_width`` x ``image_height`` (None for the exit of a lost track); ``capture_time`` is that frame's
    epoch seconds (UTC)."""

    event_id: str   # 32 lowercase hex digits
    camera_id: str
    seq: int
    event: EventType
    track_id: int
    class_id: int
    class_name: str
    score: float
    capture_time: float
    frame_seq: int
    image_width: int
    image_height: int
    zone: Optional[str] = None
    line: Optional[str] = None
    direction: Optional[Literal["in", "out"]] = None   # cross only
    box: Optional[tuple[float, float, float, float]] = None
    dwell_s: Optional[float] = None   # dwell only: seconds inside when it fired
    track_lost: bool = False          # exit only: the track was removed after being lost, not seen leaving
    snapshot_id: Optional[str] = None
    clip: Optional[ClipPlan] = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[0-9a-f]{32}", self.event_id):
            raise ValueError(f"event_id must be 32 lowercase hex digits, got {self.event_id!r}")
        if self.event not in ("enter", "exit", "cross", "dwell"):
            raise ValueError(f"event must be enter, exit, cross or dwell, got {self.event!r}")
        if self.seq < 1 or self.track_id < 1 or self.frame_seq < 0:
            raise ValueError(f"seq and track_id must be >= 1 and frame_seq >= 0, got {self.seq}, {self.track_id}, "
                             f"{self.frame_seq}")
        t = self.capture_time
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ValueError(f"capture_time must be a finite number, got {t!r}")
