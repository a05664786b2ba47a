"""The newest analytics events of every camera, for the page: the frame path notes each one as it is
published; a page's event stream reads what came since its cursor."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from appliance.mqtt.messages import EventMessage

KEEP = 500


def event_row(e: EventMessage) -> dict[str, Any]:
    return {"event_id": e.event_id, "camera_id": e.camera_id, "seq": e.seq, "event": e.event,
            "track_id": e.track_id, "class_name": e.class_name, "score": round(float(e.score), 3), "zone": e.zone,
            "line": e.line, "direction": e.direction, "capture_time": e.capture_time, "snapshot_id": e.snapshot_id,
            "clip": e.clip.url if e.clip is not None else None}


class EventFeed:
    """A bounded, thread-safe list of the newest events, each with a running number (the cursor)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._rows: deque[tuple[int, dict[str, Any]]] = deque(maxlen=keep)
        self._next = 1
        self._lock = threading.Lock()

    def note(self, events: Sequence[EventMessage]) -> None:
        rows = [event_row(e) for e in events]
        with self._lock:
            for row in rows:
                self._rows.append((self._next, row))
                self._next += 1

    def since(self, cursor: int) -> tuple[list[dict[str, Any]], int]:
        """The events after ``cursor`` (oldest first) and the cursor to ask with next."""
        with self._lock:
            return [row for n, row in self._rows if n > cursor], self._next - 1

    def newest(self, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            return [row for _, row in list(self._rows)[-limit:]][::-1]
