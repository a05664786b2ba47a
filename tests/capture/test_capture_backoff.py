"""The reconnect backoff on its own: exponential growth up to the cap, reset, and jitter inside its band."""

from __future__ import annotations

import random

import pytest

from appliance.backoff import Backoff, RestartPolicy, capped_exponential
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


def test_delays_stay_at_the_cap_after_far_more_failures_than_a_float_power_allows() -> None:
    """2.0**1024 overflows; a camera dead for ~8.5 hours at the 30 s default gets there."""
    backoff = Backoff(BackoffConfig(), random.Random(1))  # defaults: 0.5 s doubling to 30 s, +/-20 %
    delays = [backoff.next_delay() for _ in range(5000)]
    assert backoff.attempt == 5000
    assert all(30 * 0.8 - 1e-9 <= d <= 30 * 1.2 + 1e-9 for d in delays[7:]), max(delays)
    assert min(delays[1000:]) < 30 < max(delays[1000:])  # still jittered around the cap, not stuck


@pytest.mark.parametrize("initial_s, max_s, factor", [(0.5, 30, 2), (0.0001, 3600, 10), (1e-300, 3600, 1.0001),
                                                      (0.5, 30, 1.01), (1, 1, 10)])
def test_capped_exponential_reaches_the_cap_and_never_overflows(initial_s: float, max_s: float,
                                                                factor: float) -> None:
    for attempt in (0, 1, 10, 1023, 1024, 1025, 10**6, 10**400):
        delay = capped_exponential(initial_s, max_s, factor, attempt)
        assert min(initial_s, max_s) <= delay <= max_s
    assert capped_exponential(initial_s, max_s, factor, 10**8) == max_s  # even a slow factor gets there
    assert capped_exponential(initial_s, max_s, factor, 0) == min(initial_s, max_s)


def test_restart_policy_doubles_to_its_cap_for_any_number_of_restarts() -> None:
    policy = RestartPolicy(initial_backoff_s=1, max_backoff_s=60)
    assert [policy.backoff(n) for n in (0, 1, 2, 3, 6, 7, 2000, 10**9)] == [1, 1, 2, 4, 32, 60, 60, 60]
