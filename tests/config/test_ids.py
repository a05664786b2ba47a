"""One id rule for device, camera, zone and line ids, and for the MQTT topic levels built from them: the same
value is accepted (or refused) by every config key that holds an id and by the topic builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.appconfig.check import check_config
from appliance.mqtt.errors import MqttConfigError
from appliance.mqtt.topics import Topics, check_camera_id

# Written from the rule in docs/mqtt.md, not from the code's pattern.
GOOD = ["Dock-1", "line.3", "a", "CAM_07", "x" * 64, "0"]
BAD = ["", "has space", "Line/1", "+", "#", "-lead", ".hidden", "_x", "x" * 65, "é"]

CONFIG = """\
device: {{id: {device}}}
mqtt: {{host: localhost}}
cameras:
  - id: {camera}
    source: {{type: rtsp, url: 'rtsp://10.0.0.7/stream'}}
    width: 640
    height: 480
    analytics:
      zones: [{{name: {zone}, points: [[0, 0], [100, 0], [100, 100]]}}]
      lines: [{{name: {line}, a: [0, 50], b: [100, 50], in_side: left}}]
"""
KEYS = {"device": "device.id", "camera": "cameras.0.id", "zone": "cameras.0.analytics.zones.0.name",
        "line": "cameras.0.analytics.lines.0.name"}


def _report(tmp_path: Path, **ids: str) -> list[str]:
    values = {"device": "box", "camera": "cam", "zone": "zone", "line": "line"} | ids
    path = tmp_path / "appliance.yaml"
    path.write_text(CONFIG.format(**{k: repr(v) for k, v in values.items()}))
    return [str(issue) for issue in check_config(path, environ={}, machine=False).issues]


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_every_id_key_accepts_what_the_topic_rule_accepts(kind: str, tmp_path: Path) -> None:
    for value in GOOD:
        assert _report(tmp_path, **{kind: value}) == [], value
        Topics("appliance", value)  # the same value is a topic level


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_every_id_key_refuses_what_the_topic_rule_refuses_and_says_the_rule(kind: str, tmp_path: Path) -> None:
    for value in BAD:
        issues = _report(tmp_path, **{kind: value})
        assert len(issues) == 1 and f": {KEYS[kind]}: " in issues[0], (value, issues)
        assert "letters, digits, '_', '.', '-', starting with a letter or digit" in issues[0], issues
        with pytest.raises(MqttConfigError):
            Topics("appliance", value)


def test_a_camera_id_that_names_a_device_topic_is_still_refused() -> None:
    check_camera_id("Dock-1")
    with pytest.raises(MqttConfigError, match="reserved"):
        check_camera_id("status")
