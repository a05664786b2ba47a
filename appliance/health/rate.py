"""A recent event rate (e.g. inferences/s over the last 10 s) for ``STATUS=`` and the health summary.

An average since start hides a pipeline that stopped an hour ago; this counts only the last ``window_s``.
Completions are counted in buckets of ``window_s / buckets`` seconds (a small ring, so memory does not grow with
the rate); the rate is the count of the buckets inside the window divided by the time they cover, which is
shorter than the window only in the first seconds after start.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable


class RecentRate:
    """``note()`` per event (any thread); ``per_second()`` is the rate over about the last ``window_s``."""

    def __init__(self, window_s: float = 10.0, *, buckets: int = 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0 or buckets < 1:
            raise ValueError("window_s must be > 0 and buckets >= 1")
        self.window_s = window_s
        self._width = window_s / buckets
        self._counts = [0] * buckets
        self._index = [-1] * buckets  # which bucket number (time // width) each slot holds now
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()

    def note(self, n: int = 1) -> None:
        number = math.floor(self._clock() / self._width)
        slot = number % len(self._counts)
        with self._lock:
            if self._index[slot] != number:  # an old bucket: its events are out of the window now
                self._index[slot], self._counts[slot] = number, 0
            self._counts[slot] += n

    def per_second(self) -> float:
        now = self._clock()
        current = math.floor(now / self._width)
        oldest = current - len(self._counts) + 1
        with self._lock:
            total = sum(c for c, i in zip(self._counts, self._index) if oldest <= i <= current)
        # The buckets in the window cover from the start of the oldest one to now, but never before the start.
        covered = now - max(oldest * self._width, self._started)
        return total / covered if covered > 0 else 0.0
