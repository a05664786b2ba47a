"""Reconnect delays: exponential, capped, jittered. Pure, so tests can check the schedule without sleeping."""

from __future__ import annotations

import random
from typing import Optional

from appliance.mqtt.config import BackoffConfig


class Backoff:
    def __init__(self, config: BackoffConfig, rng: Optional[random.Random] = None) -> None:
        self._config = config
        self._rng = rng or random.Random()
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures

    def next_delay(self) -> float:
        """The delay before the next attempt; each call counts one more failure."""
        c = self._config
        base = min(c.max_s, c.initial_s * c.multiplier ** min(self._failures, 64))
        self._failures += 1
        spread = base * c.jitter
        return max(0.0, min(c.max_s, base + self._rng.uniform(-spread, spread)))

    def reset(self) -> None:
        self._failures = 0
