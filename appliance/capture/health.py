"""One camera's health as its ring header tells it: state, counters, frame rate, last error."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from appliance.capture.layout import CaptureState
from appliance.capture.ringfile import get_text


@dataclass(frozen=True)
class CaptureHealth:
    """A snapshot of one camera's state and counters, read from its ring header."""

    camera_id: str
    state: CaptureState
    state_age_s: float
    writer_alive: bool
    writer_pid: int
    generation: int
    latest_seq: int
    frames: int
    drops: int
    ring_full: int
    decode_errors: int
    reconnects: int
    stalls: int
    fps: float
    last_frame_age_s: float | None
    last_error: str
    width: int = 0   # the ring's frame size: configured, or read from the source at start
    height: int = 0

    @classmethod
    def from_header(cls, h: np.ndarray, camera_id: str, writer_alive: bool, now: float) -> "CaptureHealth":
        last = float(h["last_frame_mono"])
        return cls(
            camera_id=camera_id,
            state=CaptureState(int(h["state"])),
            state_age_s=max(0.0, now - float(h["state_since_mono"])),
            writer_alive=writer_alive,
            writer_pid=int(h["writer_pid"]),
            generation=int(h["generation"]),
            latest_seq=int(h["latest_seq"]),
            frames=int(h["frames"]),
            drops=int(h["drops"]),
            ring_full=int(h["ring_full"]),
            decode_errors=int(h["decode_errors"]),
            reconnects=int(h["reconnects"]),
            stalls=int(h["stalls"]),
            fps=float(h["fps"]),
            last_frame_age_s=max(0.0, now - last) if last > 0 else None,
            last_error=get_text(h, "last_error"),
            width=int(h["width"]),
            height=int(h["height"]),
        )
