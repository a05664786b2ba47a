"""Create/delete tallies of one server's Triton handles, which the leak tests compare.

Each ``Server`` owns one ``HandleCounters`` (``server.counters``) and hands it to its runtime, so two servers in
one process, or consecutive servers in one test session, never share counts.
"""

from __future__ import annotations

import threading

COUNTER_NAMES = (
    "requests_created", "requests_deleted", "responses_received", "responses_deleted",
    "buffers_allocated", "buffers_released", "inputs_released",
)  # fmt: skip


class HandleCounters:
    """Thread-safe tallies: every handle created must be deleted exactly once (``requests_created`` ==
    ``requests_deleted`` once the server is idle, and so on)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(COUNTER_NAMES, 0)

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._values[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)
