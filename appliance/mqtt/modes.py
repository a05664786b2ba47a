"""Per-camera publish modes: every frame, on change of the class counts, or at a fixed rate.

A gate only decides; the publisher counts what it suppresses. Time is monotonic seconds passed in by the
caller, so tests drive it directly.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import numpy as np

from appliance.detections import Detections
from appliance.mqtt.config import PublishConfig


class PublishGate:
    def __init__(self, config: PublishConfig) -> None:
        self._config = config
        self._last_time: Optional[float] = None
        self._next_due: Optional[float] = None
        self._last_signature: Optional[frozenset[tuple[int, int]]] = None

    def _signature(self, detections: Detections) -> frozenset[tuple[int, int]]:
        # In float64, as the Python float min_score is: a float32 comparison would round it first.
        counted = detections.scores.astype(np.float64) >= self._config.min_score
        return frozenset(Counter(detections.class_ids[counted].tolist()).items())

    def admit(self, detections: Detections, now: float) -> bool:
        """True if this frame's detections should be published."""
        c = self._config
        if c.mode == "every_frame":
            return True
        if c.mode == "fixed_rate":
            assert c.rate_hz is not None  # the config validator guarantees it
            period = 1.0 / c.rate_hz
            if self._next_due is not None and now < self._next_due:
                return False
            # Keep to the schedule so the average rate is rate_hz whatever the camera's fps; after a long gap
            # restart it instead of bursting to catch up.
            on_time = self._next_due is not None and now - self._next_due < period
            self._next_due = (self._next_due if on_time else now) + period  # type: ignore[operator]
            return True
        signature = self._signature(detections)
        changed = signature != self._last_signature
        due = (c.heartbeat_s is not None and self._last_time is not None
               and now - self._last_time >= c.heartbeat_s)
        if self._last_time is not None and not changed and not due:
            return False
        self._last_signature = signature
        self._last_time = now
        return True
