"""The hand-over from the frame path to the OPC UA server's thread: the latest counts per camera (latest wins)
and a bounded queue of events (oldest dropped). Callers never wait on the server: a put is a short lock and, for
the first put since the server last took, one wake-up of its event loop.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.events import Event

MAX_EVENTS = 1024


@dataclass
class Taken:
    counts: dict[str, tuple[int, Mapping[str, Any]]] = field(default_factory=dict)  # camera -> (active, counts)
    events: list[Event] = field(default_factory=list)
    dropped: int = 0  # events that did not fit before the server took them


class Feed:
    """What appliance.pipeline.sinks.OpcUaSink hands events and counts to (``publish_events``, ``publish_counts``)."""

    def __init__(self, max_events: int = MAX_EVENTS) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, Mapping[str, Any]]] = {}
        self._events: deque[Event] = deque(maxlen=max_events)
        self._dropped = 0
        self._wake: Callable[[], None] | None = None
        self._woken = False

    def attach(self, wake: Callable[[], None] | None) -> None:
        """``wake`` is called (from any thread) when something arrives; None detaches (the server stopped)."""
        with self._lock:
            self._wake, self._woken = wake, False

    def publish_events(self, events: Sequence[Event]) -> int:
        with self._lock:
            overflow = len(self._events) + len(events) - (self._events.maxlen or 0)
            self._dropped += max(0, overflow)
            self._events.extend(events)
        self._poke()
        return len(events)

    def publish_counts(self, camera_id: str, last_event_seq: int, active_tracks: int,
                       counts: Mapping[str, Mapping[str, Mapping[str, int]]]) -> None:
        with self._lock:
            self._counts[camera_id] = (active_tracks, counts)
        self._poke()

    def _poke(self) -> None:
        with self._lock:
            wake = None if self._woken else self._wake
            self._woken = wake is not None or self._woken
        if wake is None:
            return
        try:
            wake()
        except RuntimeError:  # the server's loop is gone (it stopped or died): the frame path goes on without it
            self.attach(None)

    def take(self) -> Taken:
        """Everything since the last take; the next put wakes the server again."""
        with self._lock:
            taken = Taken(self._counts, list(self._events), self._dropped)
            self._counts, self._dropped, self._woken = {}, 0, False
            self._events.clear()
        return taken
