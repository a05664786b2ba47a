"""The per-camera message counter of detections messages: ``boot_id``, ``message_seq``, ``frames_skipped``.

The number is taken after the camera's publish mode admitted the message and before it is spooled, so a gap in
``message_seq`` is a message lost on the way, never one the spool or a broker outage held back (docs/mqtt.md,
"Telling a lost message from a skipped frame")."""

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
