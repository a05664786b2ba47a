"""The per-camera message counter of detections messages: ``boot_id``, ``message_seq``, ``frames_skipped``.

A subscriber cannot tell a lost message from a skipped frame by ``seq`` (the capture frame number) alone: frames
are skipped on purpose (latest frame wins, the rate cap, frames dropped while the model recovers, failed
inferences, publish modes). So every published detections message is also numbered per camera, 1, 2, 3, ...
within one ``boot_id`` (one per publisher, i.e. per appliance process start), and says how many frames of its
camera were not published since the previous message. The number is taken after the camera's publish mode
admitted the message and before it is spooled: the spool and a broker outage cannot make a gap, so a gap in
``message_seq`` is a message lost on the way (or dropped by the bounded spool, counted there).

``frames_skipped`` is the difference of the frame numbers: every frame between two published ones was not
published, whatever the reason. The first message of a camera within a boot has 0 (there is no previous one),
and so has a message whose ``seq`` is not above the previous one (the camera's frame ring was made anew).
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class MessageNumber:
    boot_id: str
    message_seq: int
    frames_skipped: int


class MessageCounter:
    """Numbers each camera's published detections; thread-safe (the cameras publish from several threads)."""

    def __init__(self, boot_id: str | None = None) -> None:
        if boot_id is not None and not re.fullmatch(r"[0-9a-f]{32}", boot_id):
            raise ValueError(f"boot_id must be 32 lowercase hex digits (a uuid4 hex), got {boot_id!r}")
        self.boot_id = boot_id if boot_id is not None else uuid.uuid4().hex
        self._lock = threading.Lock()
        self._last: dict[str, tuple[int, int]] = {}  # camera -> (message_seq, frame seq) of its last message

    def next(self, camera_id: str, seq: int) -> MessageNumber:
        """The number of the message for frame ``seq`` of ``camera_id``, which is about to be spooled."""
        with self._lock:
            last = self._last.get(camera_id)
            if last is None:
                number = MessageNumber(self.boot_id, 1, 0)
            else:
                number = MessageNumber(self.boot_id, last[0] + 1, max(0, seq - last[1] - 1))
            self._last[camera_id] = (number.message_seq, seq)
            return number
