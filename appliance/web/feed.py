"""The newest analytics events of every camera, for the page: the frame path notes each one as it is
published; a page's event stream reads what came since its cursor; the events page asks for a filtered page of
them. They live in memory (a restart starts an empty list); their snapshots are on disk."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appliance.events import Event

KEEP = 2000
PAGE_MAX = 200


def event_row(e: Event) -> dict[str, Any]:
    return {"event_id": e.event_id, "camera_id": e.camera_id, "seq": e.seq, "event": e.event,
            "track_id": e.track_id, "class_name": e.class_name, "score": round(float(e.score), 3), "zone": e.zone,
            "line": e.line, "direction": e.direction, "capture_time": e.capture_time, "snapshot_id": e.snapshot_id,
            "clip": e.clip.url if e.clip is not None else None}


@dataclass(frozen=True)
class EventQuery:
    """Which events: each field None matches all. ``name``: a zone's or line's; times in UTC seconds;
    ``before``: only events older than this cursor (the next page)."""

    camera: str | None = None
    event: str | None = None
    name: str | None = None
    since: float | None = None
    until: float | None = None
    before: int | None = None

    def matches(self, n: int, row: dict[str, Any]) -> bool:
        return ((self.camera is None or row["camera_id"] == self.camera)
                and (self.event is None or row["event"] == self.event)
                and (self.name is None or self.name in (row["zone"], row["line"]))
                and (self.since is None or row["capture_time"] >= self.since)
                and (self.until is None or row["capture_time"] <= self.until)
                and (self.before is None or n < self.before))


class EventFeed:
    """A bounded, thread-safe list of the newest events, each with a running number (the cursor)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._rows: deque[tuple[int, dict[str, Any]]] = deque(maxlen=keep)
        self._next = 1
        self._lock = threading.Lock()

    def note(self, events: Sequence[Event]) -> None:
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

    def page(self, query: EventQuery, limit: int = 50) -> dict[str, Any]:
        """The newest ``limit`` (at most PAGE_MAX) events that match, newest first, each with its cursor ``n``;
        ``older``: the cursor to ask ``before`` for the next page, None on the last; ``matched``: how many match."""
        limit = max(1, min(limit, PAGE_MAX))
        with self._lock:
            rows = list(self._rows)
        found = [(n, row) for n, row in reversed(rows) if query.matches(n, row)]
        page = [{**row, "n": n} for n, row in found[:limit]]
        return {"events": page, "older": page[-1]["n"] if len(found) > limit else None, "matched": len(found),
                "kept": KEEP}
