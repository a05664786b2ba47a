"""The reconnect backoff on its own: exponential growth up to the cap, reset, and jitter inside its band."""

from __future__ import annotations

import random

import pytest

from appliance.capture.backoff import Backoff
from appliance.capture.config import BackoffConfig


def test_without_jitter_delays_double_up_to_the_cap_and_reset_starts_over() -> None:
    backoff = Backoff(BackoffConfig(initial_s=0.5, max_s=4, factor=2, jitter=0))
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.attempt == 6
    backoff.reset()
    assert backoff.attempt == 0
    assert [backoff.next_delay() for _ in range(3)] == [0.5, 1.0, 2.0]


def test_jittered_delays_stay_in_the_band_around_their_base_and_differ() -> None:
    config = BackoffConfig(initial_s=0.5, max_s=4, factor=2, jitter=0.2)
    backoff = Backoff(config, random.Random(7))
    bases = [min(4.0, 0.5 * 2**k) for k in range(12)]
    delays = [backoff.next_delay() for _ in bases]
    for base, delay in zip(bases, delays):
        assert base * 0.8 - 1e-9 <= delay <= base * 1.2 + 1e-9, f"{delay} outside +/-20% of {base}"
    capped = delays[3:]  # same base (the cap): only jitter can make them differ
    assert len(set(capped)) == len(capped), f"jitter did not spread the capped delays: {capped}"
    assert delays != bases  # not the plain exponential sequence


def test_the_same_seed_gives_the_same_delays_and_another_seed_does_not() -> None:
    """Cameras get independent random sources, so they do not retry in lockstep."""
    config = BackoffConfig(initial_s=1, max_s=1, jitter=0.5)

    def run(seed: int) -> list[float]:
        backoff = Backoff(config, random.Random(seed))
        return [backoff.next_delay() for _ in range(5)]

    assert run(3) == run(3)
    assert run(3) != pytest.approx(run(4))
