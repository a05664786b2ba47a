"""pipeline.recovery speaks the one backoff vocabulary (``backoff: {initial_s, max_s, factor, jitter}``); its old
flat keys ``initial_backoff_s`` / ``max_backoff_s`` still work, with a deprecation warning, like ``multiplier``."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from appliance.appconfig.app import AppConfig, RecoveryConfig
from appliance.appconfig.check import CheckReport, check_config

BASE = {"device": {"id": "a"}, "mqtt": {"host": "localhost"},
        "cameras": [{"id": "c", "source": {"type": "file", "path": "/tmp/v.mp4"}, "width": 640, "height": 480}]}


def _recovery(recovery: dict[str, Any]) -> RecoveryConfig:
    return AppConfig.model_validate({**BASE, "pipeline": {"recovery": recovery}}).pipeline.recovery


def test_the_reload_schedule_follows_the_backoff_section() -> None:
    policy = _recovery({"backoff": {"initial_s": 1, "max_s": 20, "factor": 3}, "max_failures": 7}).policy()
    # 1 * 3**n capped at 20, worked out by hand: 1, 3, 9, 27 -> 20
    assert [policy.backoff(n) for n in (1, 2, 3, 4, 9)] == [1.0, 3.0, 9.0, 20.0, 20.0]
    assert (policy.max_restarts, policy.window_s, policy.max_backoff_s) == (7, 300.0, 20.0)


def test_the_defaults_are_the_documented_schedule_without_jitter() -> None:
    policy = _recovery({}).policy()
    assert [policy.backoff(n) for n in range(1, 9)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_jitter_spreads_each_delay_within_its_fraction() -> None:
    policy = _recovery({"backoff": {"initial_s": 10, "max_s": 10, "jitter": 0.5}}).policy()
    delays = [policy.backoff(3, random.Random(seed)) for seed in range(200)]
    assert all(5.0 <= d <= 15.0 for d in delays)
    assert min(delays) < 7 and max(delays) > 13  # really spread, not the bare 10 s


def test_the_old_flat_keys_still_work_with_a_deprecation_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="appliance.backoff"):
        recovery = _recovery({"initial_backoff_s": 0.5, "max_backoff_s": 5, "window_s": 60})
    assert (recovery.backoff.initial_s, recovery.backoff.max_s, recovery.window_s) == (0.5, 5.0, 60.0)
    assert [r.getMessage() for r in caplog.records] == [
        "config: recovery key 'initial_backoff_s' is deprecated; use 'backoff.initial_s' (same meaning)",
        "config: recovery key 'max_backoff_s' is deprecated; use 'backoff.max_s' (same meaning)"]


def test_an_old_key_beside_a_backoff_section_without_it_joins_that_section() -> None:
    recovery = _recovery({"max_backoff_s": 8, "backoff": {"initial_s": 2, "factor": 4}})
    assert (recovery.backoff.initial_s, recovery.backoff.max_s, recovery.backoff.factor) == (2.0, 8.0, 4.0)


def _check_recovery(tmp_path: Path, recovery: str) -> tuple[Path, CheckReport]:
    """check-config's report on an app config whose pipeline.recovery section is ``recovery`` (line 7 on)."""
    path = tmp_path / "app.yaml"
    path.write_text("device: {id: a}\nmqtt: {host: localhost}\ncameras:\n"
                    "  - {id: c, source: {type: file, path: /tmp/v.mp4}, width: 640, height: 480}\n"
                    "pipeline:\n  recovery:\n" + recovery)
    return path, check_config(path, environ={}, machine=False)


def test_both_names_for_one_value_is_an_error_at_its_line(tmp_path: Path) -> None:
    path, report = _check_recovery(tmp_path, "    initial_backoff_s: 1\n    backoff: {initial_s: 2}\n")
    assert [str(i) for i in report.issues] == [
        f"{path}:6: pipeline.recovery: give backoff.initial_s only; initial_backoff_s is its deprecated name"]


def test_max_below_initial_names_the_new_keys(tmp_path: Path) -> None:
    _, report = _check_recovery(tmp_path, "    max_backoff_s: 1\n    backoff: {initial_s: 2}\n")
    assert len(report.issues) == 1, report.issues
    assert "pipeline.recovery.backoff.max_s (1.0) must be >= pipeline.recovery.backoff.initial_s (2.0)" in str(
        report.issues[0])
