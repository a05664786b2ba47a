"""The recent rate behind "inferences/s" in STATUS= and `appliance status`: over the last 10 s, not since start."""

from __future__ import annotations

import pytest

from appliance.health.rate import RecentRate


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_rate_is_of_the_last_window_not_an_average_since_start() -> None:
    clock = Clock(1000.0)
    rate = RecentRate(10.0, buckets=20, clock=clock)
    for _ in range(600):  # 60 s at 10/s
        clock.now += 0.1
        rate.note()
    assert rate.per_second() == pytest.approx(10.0, rel=0.06)
    for _ in range(100):  # then 10 s at 2/s
        clock.now += 0.5
        rate.note()
    assert rate.per_second() == pytest.approx(2.0, rel=0.06)  # since start it would be 610 / 110 s = 5.5/s
    clock.now += 10.5  # nothing for a window: the rate says so, it does not keep the old value
    assert rate.per_second() == 0.0


def test_the_first_seconds_count_only_the_time_since_start() -> None:
    clock = Clock(50.0)
    rate = RecentRate(10.0, clock=clock)
    assert rate.per_second() == 0.0
    clock.now = 52.0
    rate.note(8)  # 8 events in the 2 s since start: 4/s, not 8 / 10 s
    assert rate.per_second() == pytest.approx(4.0)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="window_s must be > 0"):
        RecentRate(0.0)
    with pytest.raises(ValueError, match="buckets >= 1"):
        RecentRate(10.0, buckets=0)
