"""MqttConfig: defaults, and a clear error for each bad input."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from appliance.backoff import Backoff
from appliance.mqtt.config import MqttConfig, PublishConfig
from appliance.mqtt.errors import MqttConfigError
from appliance.mqtt.topics import Topics


def _cfg(**kw: Any) -> MqttConfig:
    return MqttConfig.model_validate({"device_id": "line1-box", **kw})


def test_defaults_are_safe() -> None:
    cfg = _cfg()
    assert cfg.qos.detections == 1 and cfg.qos.status == 1
    assert cfg.clean_session is False  # persistent session
    assert cfg.spool.overflow == "drop_oldest" and cfg.spool.synchronous == "normal"
    assert cfg.effective_client_id == "appliance-line1-box"
    assert cfg.publish_config("any").mode == "every_frame"


@pytest.mark.parametrize("doc, fragment", [
    ({"hots": "broker"}, "Extra inputs are not permitted"),
    ({"qos": {"detections": 3}}, "Input should be 0, 1 or 2"),
    ({"qos": {"detections": "1"}}, "Input should be 0, 1 or 2"),
    ({"port": 0}, "greater than or equal to 1"),
    ({"port": 70000}, "less than or equal to 65535"),
    ({"protocol": "3.1"}, "'3.1.1' or '5'"),
    ({"device_id": "line/1"}, "is not a valid id"),
    ({"device_id": "+"}, "is not a valid id"),
    ({"topic_prefix": "factory/#"}, "String should match pattern"),
    ({"topic_prefix": "factory//line"}, "String should match pattern"),
    ({"client_id": "a b"}, "String should match pattern"),
    ({"tls": {"cert": "/c.pem"}}, "tls.cert and tls.key must be given together"),
    ({"tls": {"ca": "/ca.pem", "verify": False}}, "Extra inputs are not permitted"),
    ({"password": "x"}, "a password needs a username"),
    ({"username": "u", "password": "x", "password_file": "/run/p"}, "either password or password_file"),
    ({"transport": "websockets"}, "websockets' on port 1883"),
    ({"keepalive_s": 1}, "greater than or equal to 5"),
    ({"inflight_window": 0}, "greater than or equal to 1"),
    ({"backoff": {"initial_s": 10, "max_s": 5}}, "max_s (5.0) must be >= backoff.initial_s (10.0)"),
    ({"backoff": {"jitter": 0.9}}, "less than or equal to 0.5"),
    ({"spool": {"max_bytes": 1000}}, "greater than or equal to 65536"),
    ({"spool": {"overflow": "drop_random"}}, "'drop_oldest', 'drop_newest' or 'block'"),
    ({"spool": {"synchronous": "off"}}, "'normal' or 'full'"),
    ({"spool": {"max_age_s": 0}}, "greater than 0"),
    ({"publish": {"mode": "fixed_rate"}}, "'fixed_rate' needs rate_hz"),
    ({"publish": {"mode": "every_frame", "rate_hz": 5}}, "rate_hz only applies to mode 'fixed_rate'"),
    ({"publish": {"mode": "fixed_rate", "rate_hz": 5, "heartbeat_s": 1}}, "heartbeat_s only applies"),
    ({"publish": {"mode": "on_change", "min_score": 1.5}}, "less than or equal to 1"),
    ({"cameras": {"cam/0": {"mode": "every_frame"}}}, "camera id 'cam/0' is not a valid id"),
    ({"cameras": {"status": {"mode": "every_frame"}}}, "camera id 'status' is reserved"),
])
def test_bad_input_is_rejected_with_a_clear_message(doc: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        _cfg(**doc)
    assert fragment in str(info.value)


def test_missing_device_id_is_an_error() -> None:
    with pytest.raises(ValidationError, match="device_id"):
        MqttConfig.model_validate({})


def test_per_camera_publish_mode_overrides_default() -> None:
    cfg = _cfg(cameras={"door": {"mode": "on_change", "heartbeat_s": 60}})
    assert cfg.publish_config("door") == PublishConfig(mode="on_change", heartbeat_s=60)
    assert cfg.publish_config("belt").mode == "every_frame"


def test_password_is_secret_in_repr() -> None:
    cfg = _cfg(username="u", password="hunter2")
    assert "hunter2" not in repr(cfg) and "hunter2" not in str(cfg.model_dump())


def test_topics_layout_and_bad_ids() -> None:
    t = Topics("factory/line1", "box7")
    assert t.detections("cam0") == "factory/line1/box7/cam0/detections"
    assert t.camera_status("cam0") == "factory/line1/box7/cam0/status"
    assert t.device_status == "factory/line1/box7/status"
    assert t.health == "factory/line1/box7/health"
    assert t.command_filter == "factory/line1/box7/command/+"
    assert t.command_name("factory/line1/box7/command/reload") == "reload"
    assert t.command_name("factory/line1/box7/cam0/detections") is None
    with pytest.raises(MqttConfigError, match="camera id 'a#' is not a valid id"):
        t.detections("a#")
    with pytest.raises(MqttConfigError, match="reserved"):
        t.detections("command")
    with pytest.raises(MqttConfigError, match="topic prefix"):
        Topics("/abs", "box7")


def test_spool_path_resolution(tmp_path: Any) -> None:
    assert _cfg().spool_path(tmp_path) == tmp_path / "mqtt-spool.sqlite3"
    assert _cfg(spool={"path": "q/spool.db"}).spool_path(tmp_path) == tmp_path / "q" / "spool.db"
    assert _cfg(spool={"path": "/var/spool/a.db"}).spool_path(tmp_path) == Path("/var/spool/a.db")


def test_backoff_growth_is_called_factor_as_for_cameras() -> None:
    assert _cfg(backoff={"factor": 3}).backoff.factor == 3.0
    assert _cfg().backoff.factor == 2.0


def test_the_old_backoff_key_multiplier_still_works_with_a_deprecation_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="appliance.backoff"):
        assert _cfg(backoff={"multiplier": 3}).backoff.factor == 3.0
    assert ["config: backoff key 'multiplier' is deprecated; use 'factor' (same meaning)"] == [
        r.getMessage() for r in caplog.records]
    with pytest.raises(ValidationError, match="give factor only; multiplier is its deprecated name"):
        _cfg(backoff={"multiplier": 3, "factor": 3})


def test_jittered_reconnect_delays_never_exceed_max_s_however_long_the_outage() -> None:
    backoff = Backoff(_cfg(backoff={"initial_s": 1, "max_s": 60, "jitter": 0.5}).backoff, random.Random(3))
    delays = [backoff.next_delay() for _ in range(5000)]
    assert max(delays) <= 60 and min(delays[10:]) >= 30  # [base*(1-j), min(max, base*(1+j))]
