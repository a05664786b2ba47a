"""Exponential reconnect backoff with jitter, so a camera that keeps failing is retried ever more slowly
and a line of cameras behind one switch does not reconnect in lockstep."""

from __future__ import annotations

import random

from appliance.capture.config import BackoffConfig


class Backoff:
    def __init__(self, config: BackoffConfig, rng: random.Random | None = None) -> None:
        self.config = config
        self._rng = rng or random.Random()
        self.attempt = 0

    def next_delay(self) -> float:
        """Delay before the next attempt: initial * factor**attempt, capped, times 1 +/- jitter."""
        c = self.config
        base = min(c.max_s, c.initial_s * c.factor**self.attempt)
        self.attempt += 1
        return max(0.0, base * (1 + c.jitter * self._rng.uniform(-1.0, 1.0)))

    def reset(self) -> None:
        """Frames flow again: the next failure starts from the initial delay."""
        self.attempt = 0
