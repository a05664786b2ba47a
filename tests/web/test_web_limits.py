"""The page's limits without a browser: a login costs the same for a known and an unknown name, failed logins
slow down and are logged once per burst, only this machine's names are answered on loopback, and a layout past
its limits is refused before any geometry, with a short message."""

from __future__ import annotations

import logging
import time

import pytest

from appliance.analytics.config import MAX_POINTS, AnalyticsConfig
from appliance.analytics.overlay import with_layout
from appliance.web.auth import Auth, hash_password
from appliance.web.config import UserConfig
from appliance.web.hosts import host_allowed
from appliance.web.throttle import LoginThrottle


def test_a_login_costs_the_same_for_a_known_and_an_unknown_name() -> None:
    auth = Auth({"olga": UserConfig(name="olga", role="operator", password_hash=hash_password("pw-o"))},
                open_access=False, session_s=60)
    known, unknown = [], []
    for _ in range(10):  # interleaved; CPU time of this thread and the fastest try, so other processes do not count
        for name, times in (("olga", known), ("nobody", unknown)):
            started = time.thread_time()
            assert auth.login(name, "wrong") is None
            times.append(time.thread_time() - started)
    ratio = min(unknown) / min(known)  # an unknown name that skipped scrypt would cost a few microseconds
    assert 0.8 < ratio < 1.2, (min(known), min(unknown))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failed_logins_wait_longer_each_time_and_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    throttle = LoginThrottle(free=3, first_delay_s=1, max_delay_s=8, quiet_s=600, clock=clock)
    with caplog.at_level(logging.WARNING, logger="appliance.web"):
        for _ in range(3):
            assert throttle.wait("10.0.0.9", "olga") == 0
            throttle.failed("10.0.0.9", "olga")
        delays = []
        for _ in range(5):
            delays.append(throttle.wait("10.0.0.9", "olga"))
            assert throttle.wait("10.0.0.7", "olga") > 0  # the name is held back from another address too (refused)
            clock.now += delays[-1]
            throttle.failed("10.0.0.9", "olga")
        assert delays == [1, 2, 4, 8, 8]
        assert throttle.wait("10.0.0.7", "victor") == 0  # another name from another address is not
        throttle.succeeded("10.0.0.9", "olga")
        assert throttle.wait("10.0.0.9", "olga") == 0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines  # held back: address and name; ended: address and name
    assert "failed logins for name 'olga' stopped: 8 failed, 10 more refused" in "\n".join(lines)


def test_on_loopback_only_this_machines_names_are_answered() -> None:
    for host in ("localhost", "localhost:8080", "127.0.0.1:9", "[::1]:8080", "[::1]", "LOCALHOST"):
        assert host_allowed(host), host
    for host in ("rebind.attacker.example", "rebind.attacker.example:8080", "127.0.0.1.nip.io", "", None, "[::2]"):
        assert not host_allowed(host), host
    assert host_allowed("cam-box.local:80", ["cam-box.local"])


def _zone(name: str, points: list) -> dict:
    return {"name": name, "points": points}


def test_a_layout_past_its_limits_is_refused_at_once_with_a_short_message() -> None:
    base = AnalyticsConfig()
    big = [[i % 640, (i * 7) % 480] for i in range(100_000)]
    started = time.perf_counter()
    config, problems = with_layout(base, [_zone("z", big)], [], 640, 480, ["person"])
    assert time.perf_counter() - started < 1.0 and config is None
    assert [p.message for p in problems] == [f"List should have at most {MAX_POINTS} items after validation, "
                                             "not 100000"]
    config, problems = with_layout(base, [_zone("n" * 10_000_000, [[0, 0], [9, 0], [9, 9]])], [], 640, 480,
                                   ["person"])
    assert config is None and len(problems) == 1 and len(problems[0].message) < 200, problems[0].message[:300]
    line = {"name": "l", "a": ["10", 300], "b": [10, 400], "in_side": "left"}
    config, problems = with_layout(base, [], [line], 640, 480, ["person"])
    assert config is None and problems[0].path == ("lines", 0, "a", 0), problems
    many = [_zone(f"z{i}", [[0, 0], ["1", 0], [1, 1]]) for i in range(30)]
    config, problems = with_layout(base, many, [], 640, 480, ["person"])
    assert len(problems) == 11 and problems[-1].message == "and 20 more problems"
