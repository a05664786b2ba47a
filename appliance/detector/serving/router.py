"""The route holder: which ensemble the frame submitter uses right now, and what came back from each.

The supervisor's frame path calls ``route = router.acquire()`` before each request (one attribute read under a
lock: moving traffic is atomic per request) and ``router.release(route, ok, latency_s, detections)`` when the
result (or error) arrives. The OTA health watch reads ``stats(ensemble, since)``; a switch waits for the old
ensemble's in-flight requests with ``wait_idle`` before unloading it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Route:
    """A loaded pipeline: its ensemble, the models to unload with it, and what results should be labelled.
    ``model_hash`` is ``sha256:<hex>`` of the detector engine file Triton loaded (the TensorRT plan, or the ONNX
    file under ONNX Runtime), hashed once when the version is loaded; every detections message carries it."""

    ensemble: str
    models: tuple[str, ...]
    model: str
    version: str | None              # None = the base model (engines/ + repository/profiles)
    class_names: tuple[str, ...]
    engine_key: str = ""
    model_hash: str = ""

    @property
    def label(self) -> str:
        return f"{self.model}@{self.version or 'base'}"


@dataclass(frozen=True)
class HealthSample:
    requests: int
    errors: int
    latency_p95_s: float | None
    with_detections: int

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    @property
    def detection_rate(self) -> float:
        ok = self.requests - self.errors
        return self.with_detections / ok if ok else 0.0


class Router:
    def __init__(self, initial: Route | None = None, *, clock: Callable[[], float] = time.monotonic,
                 window: int = 20000) -> None:
        self._route = initial
        self._clock = clock
        self._cond = threading.Condition()
        self._inflight: dict[str, int] = {}
        self._events: deque[tuple[float, str, bool, float, bool]] = deque(maxlen=window)

    def current(self) -> Route | None:
        return self._route

    def set(self, route: Route) -> Route | None:
        with self._cond:
            old, self._route = self._route, route
            return old

    def acquire(self) -> Route:
        with self._cond:
            if self._route is None:
                raise RuntimeError("no model is routed yet")
            self._inflight[self._route.ensemble] = self._inflight.get(self._route.ensemble, 0) + 1
            return self._route

    def release(self, route: Route, ok: bool, latency_s: float, detections: int = 0) -> None:
        with self._cond:
            self._inflight[route.ensemble] -= 1
            self._events.append((self._clock(), route.ensemble, ok, latency_s, detections > 0))
            self._cond.notify_all()

    def inflight(self, ensemble: str) -> int:
        with self._cond:
            return self._inflight.get(ensemble, 0)

    def wait_idle(self, ensemble: str, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._inflight.get(ensemble, 0) == 0, timeout)

    def stats(self, ensemble: str, since: float, until: float | None = None) -> HealthSample:
        with self._cond:
            rows = [e for e in self._events if e[1] == ensemble and e[0] >= since and (until is None or e[0] < until)]
        latencies = sorted(e[3] for e in rows if e[2])
        p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] if latencies else None
        return HealthSample(len(rows), sum(1 for e in rows if not e[2]), p95, sum(1 for e in rows if e[2] and e[4]))
