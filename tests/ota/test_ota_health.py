"""The health watch's rules (appliance.ota.health.breach) as pure functions over samples, and one rollback per
rule through a real OtaManager (tiny real ONNX model, ONNX Runtime builder) with the Traffic fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from ota_helpers import Traffic  # noqa: E402

from appliance.detector.serving.router import HealthSample
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.health import breach
from appliance.ota.manager import OtaManager

POLICY = HealthPolicy(min_requests=10, max_error_rate=0.1, max_latency_ratio=3.0, min_detection_ratio=0.5)
BASE = HealthSample(requests=100, errors=0, latency_p95_s=0.1, with_detections=80)  # 80% of frames see something


def sample(requests: int = 20, errors: int = 0, p95: float | None = 0.1, with_detections: int = 16) -> HealthSample:
    return HealthSample(requests, errors, p95, with_detections)


def test_too_few_requests_are_not_judged_unless_traffic_is_required() -> None:
    bad = sample(requests=9, errors=9, p95=10.0, with_detections=0)
    assert breach(POLICY, bad, BASE, final=False) is None
    assert breach(POLICY, bad, BASE, final=True) is None
    required = POLICY.model_copy(update={"require_traffic": True})
    assert breach(required, bad, BASE, final=False) is None
    assert breach(required, bad, BASE, final=True) == "only 9 request(s) during the watch (need 10)"


def test_error_rate_above_the_limit() -> None:
    assert breach(POLICY, sample(errors=2), BASE, final=False) is None  # 10% is not above 10%
    assert breach(POLICY, sample(errors=3), BASE, final=False) == "error rate 15.0% (3/20) is above 10.0%"


def test_absolute_p95_latency() -> None:
    bounded = POLICY.model_copy(update={"max_latency_s": 0.2})
    assert breach(bounded, sample(p95=0.2), None, final=False) is None
    assert breach(bounded, sample(p95=0.25), None, final=False) == "p95 latency 250 ms is above 200 ms"
    assert breach(bounded, sample(p95=None), None, final=False) is None  # no successful request to time
    assert breach(POLICY, sample(p95=5.0), None, final=False) is None  # unset: no absolute bound


def test_p95_latency_against_the_old_version() -> None:
    assert breach(POLICY, sample(p95=0.3), BASE, final=False) is None  # 3.0x is not above 3.0x
    assert breach(POLICY, sample(p95=0.35), BASE, final=False) == \
        "p95 latency 350 ms is 3.5x the old version's 100 ms (limit 3.0x)"
    # no judgement without a baseline worth comparing with
    assert breach(POLICY, sample(p95=5.0), None, final=False) is None
    assert breach(POLICY, sample(p95=5.0), HealthSample(9, 0, 0.1, 8), final=False) is None
    assert breach(POLICY, sample(p95=5.0), HealthSample(100, 100, None, 0), final=False) is None


def test_detection_rate_is_judged_at_the_end_of_the_watch() -> None:
    blind = sample(with_detections=7)  # 35% of frames, the floor is 50% of 80% = 40%
    assert breach(POLICY, blind, BASE, final=False) is None
    assert breach(POLICY, blind, BASE, final=True) == "frames with detections fell to 35% from 80% (floor 40%)"
    assert breach(POLICY, sample(with_detections=8), BASE, final=True) is None  # 40%: at the floor
    # errors do not count as frames that saw nothing
    assert breach(POLICY, sample(requests=20, errors=2, with_detections=8), BASE, final=True) is None


def test_detection_rate_rule_off_or_without_a_baseline() -> None:
    blind = sample(with_detections=0)
    assert breach(POLICY.model_copy(update={"min_detection_ratio": 0}), blind, BASE, final=True) is None
    assert breach(POLICY, blind, HealthSample(100, 0, 0.1, 0), final=True) is None  # the old one saw nothing either
    assert breach(POLICY, blind, HealthSample(9, 0, 0.1, 9), final=True) is None  # too little old traffic
    assert breach(POLICY, blind, None, final=True) is None


@pytest.mark.parametrize("change,reason", [
    ({}, None),
    ({"latency_s": 1.0}, "p95 latency 1000 ms is 100.0x the old version's 10 ms (limit 3.0x)"),
    ({"detections": 0}, "frames with detections fell to 0% from 100% (floor 50%)"),
], ids=["healthy", "slow", "blind"])
def test_the_manager_rolls_back_on_each_rule(tmp_path: Path, keys: Any, sign: Callable[..., Path],
                                             tiny_source: Callable[..., Path], change: dict[str, Any],
                                             reason: str | None) -> None:
    traffic = Traffic()
    health = HealthPolicy(period_s=5, check_interval_s=0.5, min_requests=3, max_error_rate=0.2,
                          max_latency_ratio=3.0, min_detection_ratio=0.5)
    events: list[Any] = []
    m = OtaManager(tmp_path / "state", keys.trusted(), traffic.switcher, config=OtaConfig(health=health),
                   status_cb=events.append, monotonic=traffic.monotonic, sleep=traffic.sleep)
    assert m.install(sign(tiny_source("1"), "1.bundle"))["state"] == "active"
    for _ in range(5):  # version 1 serves: the baseline (10 requests, 10 ms, every frame with a detection)
        traffic.sleep(0.5)
    for key, value in change.items():
        setattr(traffic, key, value)
    result = m.install(sign(tiny_source("2"), "2.bundle"))
    if reason is None:
        assert result["state"] == "active" and m.store.serving() == "2"
        return
    assert result["state"] == "rolled_back" and result["reason"] == reason, result
    assert events[-1].state == "rolled_back" and events[-1].code == "health" and reason in events[-1].message
    assert traffic.switcher.current().version == "1"  # type: ignore[union-attr]
    assert m.store.read_pointer().version == "1" and m.store.installed() == ["1"]
