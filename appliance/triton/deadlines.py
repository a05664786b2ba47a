"""Request timeouts: one thread per server expires timed requests (instead of a timer thread per request).

Triton's own request timeout only applies in a dynamic batcher's queue, so ``timeout_s`` is enforced here:
at its deadline a request that has not finished is cancelled inside Triton and its future fails with
``InferTimeoutError`` (see ``requests.Pending.expire``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Expirable(Protocol):
    """What a deadline expires: a pending request (``requests.Pending``)."""

    def expire(self, timeout_s: float) -> None: ...


class Deadlines:
    """Expire requests at their deadline on one lazily started thread; ``stop()`` ends it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Weak references: a finished request must not be kept alive (with its outputs) until its deadline.
        self._heap: list[tuple[float, int, weakref.ref[Expirable], float]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def add(self, when: float, pending: Expirable, timeout_s: float) -> None:
        with self._cond:
            if self._stopped:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="triton-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (when, next(self._seq), weakref.ref(pending), timeout_s))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._clock()):
                    self._cond.wait(None if not self._heap else max(0.0, self._heap[0][0] - self._clock()))
                if self._stopped:
                    return
                _, _, ref, timeout_s = heapq.heappop(self._heap)
            pending = ref()
            if pending is None:
                continue
            try:
                pending.expire(timeout_s)
            except BaseException:  # noqa: BLE001
                log.exception("expiring a request failed")

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
