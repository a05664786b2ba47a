"""The one exponential backoff: capture reconnects, MQTT reconnects, child restarts, model reloads, tegrastats.

``initial_s * factor**attempt``, capped at ``max_s``, then spread by +/- ``jitter`` (a fraction). The power
stops growing once the cap is reached, so the delay stays finite however many attempts fail in a row (a dead
camera retried every 30 s reaches attempt 1024, where ``2.0**1024`` overflows a float, after about 8.5 hours).
Everything here is pure: the random source is a constructor argument, so tests check schedules without sleeping.

Config vocabulary (one for every ``backoff:`` section): ``initial_s``, ``max_s``, ``factor``, ``jitter``. The old
MQTT name ``multiplier`` is still accepted, with a deprecation warning, and so are the model recovery's old flat
keys ``initial_backoff_s`` / ``max_backoff_s`` (``lift_deprecated_keys``).
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field, model_validator

from appliance.config.base import StrictModel

log = logging.getLogger(__name__)

DEPRECATED_KEYS = {"multiplier": "factor"}  # deprecated key -> the name every backoff section uses


def lift_deprecated_keys(data: Any, section: str, renames: dict[str, str]) -> Any:
    """Move a section's old flat keys into its ``backoff:`` mapping (``renames``: old key -> backoff key), with a
    deprecation warning each, as ``multiplier`` is handled; giving both the old and the new name is an error."""
    if not isinstance(data, dict) or not any(old in data for old in renames):
        return data
    lifted = dict(data)
    backoff = lifted.get("backoff", {})
    if not isinstance(backoff, dict):
        return data  # the backoff section's own validation says what is wrong with it
    backoff = dict(backoff)
    _move_deprecated(lifted, backoff, renames, section, "backoff.")
    lifted["backoff"] = backoff
    return lifted


def _move_deprecated(source: dict[str, Any], target: dict[str, Any], renames: dict[str, str], section: str,
                     prefix: str) -> None:
    """Move each old key of ``source`` to its new name in ``target`` (``prefix`` names where that is), warning
    once per key; an old key whose new name is also given is an error."""
    for old, new in renames.items():
        if old not in source:
            continue
        if new in target:
            raise ValueError(f"give {prefix}{new} only; {old} is its deprecated name")
        log.warning("config: %s key %r is deprecated; use %r (same meaning)", section, old, prefix + new)
        target[new] = source.pop(old)


def capped_exponential(initial_s: float, max_s: float, factor: float, attempt: int) -> float:
    """``min(max_s, initial_s * factor**attempt)`` for any ``attempt >= 0``, without overflow.

    The exponent is clamped to the first one that reaches the cap (plus one, against rounding in the logarithm),
    so the power stays near ``max_s / initial_s`` however large ``attempt`` grows."""
    if attempt <= 0 or factor <= 1.0 or initial_s >= max_s:
        return min(max_s, initial_s)
    steps_to_cap = (math.log(max_s) - math.log(initial_s)) / math.log(factor)
    exponent = min(attempt, math.floor(steps_to_cap) + 1)
    try:
        return min(max_s, initial_s * factor**exponent)
    except OverflowError:  # only for an initial_s so tiny that max_s / initial_s is near the float limit
        return max_s


def jittered(base: float, jitter: float, rng: random.Random, ceiling: float | None = None) -> float:
    """``base`` spread uniformly over ``[base*(1-jitter), base*(1+jitter)]``, never below 0 nor above ``ceiling``."""
    delay = base * (1.0 + jitter * rng.uniform(-1.0, 1.0))
    if ceiling is not None:
        delay = min(ceiling, delay)
    return max(0.0, delay)


class BackoffConfig(StrictModel):
    """A ``backoff:`` section: initial_s * factor**attempt, capped at max_s, then spread by +/- jitter.

    Sections subclass this to set their own defaults and bounds; ``jitter_within_max`` says whether the jitter
    may take a delay above ``max_s`` (capture: yes, the cap is the base; MQTT: no, max_s is a hard bound)."""

    jitter_within_max: ClassVar[bool] = False
    order_message: ClassVar[str] = "backoff.max_s ({max_s}) must be >= backoff.initial_s ({initial_s})"

    initial_s: float = Field(0.5, gt=0, le=3600, description="first delay after a failure")
    max_s: float = Field(30.0, gt=0, le=3600, description="longest delay (before jitter)")
    factor: float = Field(2.0, ge=1, le=10, description="growth per consecutive failure "
                          "(the old name `multiplier` is accepted, with a warning)")
    jitter: float = Field(0.2, ge=0, le=1, description="relative random spread so clients do not retry in lockstep")

    @model_validator(mode="before")
    @classmethod
    def _rename_deprecated_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        renamed = dict(data)
        _move_deprecated(renamed, renamed, DEPRECATED_KEYS, "backoff", "")
        return renamed

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> "BackoffConfig":
        if self.max_s < self.initial_s:
            raise ValueError(self.order_message.format(max_s=self.max_s, initial_s=self.initial_s))
        return self


@dataclass(frozen=True)
class RestartPolicy:
    """How a supervised thing that keeps failing is retried: growing by ``factor`` from ``initial_backoff_s`` up
    to ``max_backoff_s``, spread by +/- ``jitter``; ``max_restarts`` within ``window_s`` is a crash loop (retried
    only every max_backoff_s)."""

    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    max_restarts: int = 5
    window_s: float = 300.0
    factor: float = 2.0
    jitter: float = 0.0

    @classmethod
    def from_backoff(cls, backoff: BackoffConfig, *, max_restarts: int = 5, window_s: float = 300.0) -> "RestartPolicy":
        """The policy a ``backoff:`` section describes."""
        return cls(initial_backoff_s=backoff.initial_s, max_backoff_s=backoff.max_s, max_restarts=max_restarts,
                   window_s=window_s, factor=backoff.factor, jitter=backoff.jitter)

    def backoff(self, recent_restarts: int, rng: random.Random | None = None) -> float:
        base = capped_exponential(self.initial_backoff_s, self.max_backoff_s, self.factor,
                                  max(0, recent_restarts - 1))
        if not self.jitter:
            return base
        return jittered(base, self.jitter, rng or random.Random())


class Backoff:
    """Counts consecutive failures; ``next_delay()`` is the wait before the next attempt, ``reset()`` after a
    success. Takes any object with ``initial_s``, ``max_s``, ``factor``, ``jitter`` (a BackoffConfig)."""

    def __init__(self, config: BackoffConfig, rng: random.Random | None = None) -> None:
        self.config = config
        self._rng = rng or random.Random()
        self.attempt = 0

    @property
    def failures(self) -> int:
        """Failures since the last reset (the same count as ``attempt``)."""
        return self.attempt

    def next_delay(self) -> float:
        """The delay before the next attempt; each call counts one more failure."""
        c = self.config
        base = capped_exponential(c.initial_s, c.max_s, c.factor, self.attempt)
        self.attempt += 1
        return jittered(base, c.jitter, self._rng, c.max_s if c.jitter_within_max else None)

    def reset(self) -> None:
        """The attempt worked: the next failure starts from the initial delay."""
        self.attempt = 0
