"""Publish-mode gates and the reconnect backoff schedule, driven directly (no sleeping)."""

from __future__ import annotations

import random

from support.detections import rows

from appliance.backoff import Backoff
from appliance.mqtt.config import BackoffConfig, PublishConfig
from appliance.mqtt.modes import PublishGate

PERSON = (0, "person", 0.9, (0, 0, 1, 1))
WEAK_PERSON = (0, "person", 0.2, (0, 0, 1, 1))
CAR = (2, "car", 0.8, (0, 0, 1, 1))


def test_every_frame_admits_everything() -> None:
    gate = PublishGate(PublishConfig())
    assert all(gate.admit(rows(), t) for t in (0.0, 0.0, 0.001))


def test_on_change_compares_class_counts_not_boxes_or_order() -> None:
    gate = PublishGate(PublishConfig(mode="on_change"))
    frames = [(), (), (PERSON,), (PERSON,), (PERSON, CAR), (CAR, PERSON), (PERSON, PERSON), ()]
    assert [gate.admit(rows(*f), float(i)) for i, f in enumerate(frames)] == [True, False, True, False, True,
                                                                              False, True, True]


def test_on_change_ignores_detections_below_min_score() -> None:
    gate = PublishGate(PublishConfig(mode="on_change", min_score=0.5))
    assert [gate.admit(rows(*f), 0.0) for f in [(PERSON,), (PERSON, WEAK_PERSON), ()]] == [True, False, True]


def test_on_change_compares_a_float32_score_with_min_score_as_python_floats() -> None:
    # 0.7 as a float32 is 0.699999988..., below the Python float 0.7 (a float32 comparison would round 0.7 down
    # to the same value and count it).
    gate = PublishGate(PublishConfig(mode="on_change", min_score=0.7))
    assert [gate.admit(rows(*f), 0.0) for f in [(), ((0, "person", 0.7, (0, 0, 1, 1)),)]] == [True, False]


def test_on_change_heartbeat_republishes_unchanged_results() -> None:
    gate = PublishGate(PublishConfig(mode="on_change", heartbeat_s=10))
    times = [0.0, 5.0, 9.9, 10.0, 15.0, 20.0]
    assert [gate.admit(rows(PERSON), t) for t in times] == [True, False, False, True, False, True]


def test_fixed_rate_admits_at_most_rate_hz() -> None:
    gate = PublishGate(PublishConfig(mode="fixed_rate", rate_hz=4))  # every 0.25 s
    times = [i * 0.1 for i in range(11)]  # 10 fps for 1 s
    admitted = [round(t, 1) for t in times if gate.admit(rows(), t)]
    assert admitted == [0.0, 0.3, 0.5, 0.8, 1.0]  # on a 0.25 s schedule: 4 per second on average


def test_fixed_rate_restarts_its_schedule_after_a_gap() -> None:
    gate = PublishGate(PublishConfig(mode="fixed_rate", rate_hz=1))
    assert [gate.admit(rows(), t) for t in (0.0, 10.0, 10.2, 10.9, 11.0)] == [True, True, False, False, True]


def test_backoff_grows_to_the_cap_and_resets() -> None:
    backoff = Backoff(BackoffConfig(initial_s=0.5, max_s=8, multiplier=2, jitter=0))
    assert [backoff.next_delay() for _ in range(7)] == [0.5, 1, 2, 4, 8, 8, 8]
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_backoff_jitter_stays_within_its_fraction() -> None:
    backoff = Backoff(BackoffConfig(initial_s=1, max_s=60, multiplier=2, jitter=0.2), random.Random(7))
    delays = [backoff.next_delay() for _ in range(10)]
    for i, d in enumerate(delays):
        base = min(60, 2 ** i)
        assert base * 0.8 <= d <= min(60, base * 1.2)
    assert len(set(delays[-4:])) > 1  # capped delays still spread a fleet out
