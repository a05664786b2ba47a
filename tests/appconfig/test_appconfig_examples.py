"""The configs in docs/examples/ are complete and valid: each passes `appliance check-config --no-machine` and
has what its comment promises (four RTSP cameras with zones and lines; a USB and a CSI camera; TLS, broker
failover, a password file and Sparkplug). The starting config is the one install-service.sh installs."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_appliance

from appliance.appconfig.check import check_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
ENV = {"CAMERA_PASSWORD": "example-only"}  # what the RTSP example reads from the environment


def _checked(name: str) -> dict:
    result = run_appliance("check-config", "--no-machine", "--json", str(EXAMPLES / name), env=ENV, expect=None)
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["ok"] and not report["warnings"], result.stdout + result.stderr
    return report


def test_every_example_config_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(
        ["appliance.yaml", "jetson-cell.yaml", "plant-node.yaml", "rtsp-line.yaml"])


def test_four_rtsp_cameras_with_zones_and_lines() -> None:
    report = _checked("rtsp-line.yaml")
    assert [c["source"] for c in report["cameras"]] == ["rtsp"] * 4
    config = check_config(EXAMPLES / "rtsp-line.yaml", environ=ENV, machine=False).config
    assert config is not None
    assert all(c.analytics is not None and c.analytics.lines for c in config.cameras)
    assert sum(len(c.analytics.zones) for c in config.cameras if c.analytics is not None) >= 2


def test_a_usb_and_a_csi_camera_on_a_jetson() -> None:
    assert [c["source"] for c in _checked("jetson-cell.yaml")["cameras"]] == ["v4l2", "gstreamer"]
    config = check_config(EXAMPLES / "jetson-cell.yaml", environ={}, machine=False).config
    assert config is not None and "nvarguscamerasrc" in config.cameras[1].source.pipeline  # type: ignore[union-attr]


def test_a_plant_node_with_tls_failover_a_password_file_and_sparkplug() -> None:
    report = _checked("plant-node.yaml")
    assert len(report["brokers"]) == 2
    config = check_config(EXAMPLES / "plant-node.yaml", environ={}, machine=False).config
    assert config is not None
    assert config.mqtt.tls is not None and config.mqtt.password_file is not None and config.mqtt.password is None
    assert config.mqtt.sparkplug is not None and config.ota.trusted_keys


def test_the_starting_config_is_valid_says_what_to_change_and_is_installed() -> None:
    report = _checked("appliance.yaml")
    text = (EXAMPLES / "appliance.yaml").read_text()
    assert text.count("# CHANGE") == 3 and report["device"] == "box-1"
    script = (REPO / "scripts" / "install-service.sh").read_text()
    assert 'cp docs/examples/appliance.yaml "$ROOT/etc/appliance/appliance.yaml"' in script
    assert "demo.yaml" not in script


def test_the_readmes_minimal_config_is_valid(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### 2. Configure"):]
    block = section[section.index("```yaml\n") + 8:section.index("```\n", section.index("```yaml\n") + 8)]
    path = tmp_path / "appliance.yaml"
    path.write_text(block)
    report = check_config(path, environ=ENV, machine=False)
    assert report.ok and report.config is not None, report.issues
    assert [c.id for c in report.config.cameras] == ["Dock-1"] and report.config.device.id == "Line-1"
