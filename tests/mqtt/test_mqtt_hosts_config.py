"""mqtt.hosts, the failover list: its spellings, the one-broker spelling still valid, and every bad entry reported
by `appliance check-config` as FILE:LINE: key: message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cli import run_appliance

from appliance.appconfig.app import AppConfig
from appliance.config.validate import load_config
from appliance.config.yamlsource import ConfigError
from appliance.mqtt.config import Broker, MqttConfig

CONFIG = """\
device: {id: line1-box}
cameras:
  - id: door
    width: 640
    height: 480
    source: {type: file, path: /tmp/door.mp4}
mqtt:
%s
"""


def _brokers(**mqtt: Any) -> tuple[Broker, ...]:
    return MqttConfig.model_validate({"device_id": "d", **mqtt}).brokers


def test_the_spellings_of_an_entry() -> None:
    assert _brokers(hosts=["mqtt-a", "mqtt-b:1884", {"host": "mqtt-c", "port": 8884}, {"host": "mqtt-d"},
                           "[fd00::7]:8883", "[fd00::8]"], port=8883) == (
        Broker("mqtt-a", 8883), Broker("mqtt-b", 1884), Broker("mqtt-c", 8884), Broker("mqtt-d", 8883),
        Broker("fd00::7", 8883), Broker("fd00::8", 8883))
    assert [str(b) for b in _brokers(hosts=["10.0.0.5", "[fd00::7]:8883"])] == ["10.0.0.5:1883", "[fd00::7]:8883"]


def test_the_one_broker_spelling_is_still_a_list_of_one() -> None:
    assert _brokers() == (Broker("localhost", 1883),)
    assert _brokers(host="broker.plant.local", port=8883) == (Broker("broker.plant.local", 8883),)


def _errors(tmp_path: Path, mqtt_lines: str) -> list[str]:
    path = tmp_path / "appliance.yaml"
    path.write_text(CONFIG % mqtt_lines)
    with pytest.raises(ConfigError) as info:
        load_config(path, AppConfig)
    return [str(issue).replace(str(path), "F") for issue in info.value.issues]


@pytest.mark.parametrize("entry, message", [
    ("mqtt://mqtt-b:1883", ": 'mqtt://mqtt-b:1883': write the broker as host or host:port, without a scheme"),
    ("mqtt-b:http", ": 'mqtt-b:http': the port must be a number from 1 to 65535, not 'http'"),
    ("mqtt-b:70000", ": 'mqtt-b:70000': the port must be a number from 1 to 65535, not '70000'"),
    ("fd00::7", ": 'fd00::7': an IPv6 address is written in brackets, [address] or [address]:port"),
    ("'[fd00::7'", ": '[fd00::7': an IPv6 address is written [address] or [address]:port"),
    ("'mqtt b'", ".host: 'mqtt b' is not a host name or address"),
    ("''", ": an empty broker address; write host or host:port"),
])
def test_a_bad_entry_is_reported_at_its_line(tmp_path: Path, entry: str, message: str) -> None:
    lines = f"  device_id: line1-box\n  hosts:\n    - mqtt-a:1883\n    - {entry}"
    assert _errors(tmp_path, lines) == [f"F:11: mqtt.hosts.1{message}"]


def test_a_bad_port_in_a_mapping_entry_is_reported_at_its_line(tmp_path: Path) -> None:
    lines = "  device_id: line1-box\n  hosts:\n    - host: mqtt-a\n      port: 0"
    errors = _errors(tmp_path, lines)
    assert len(errors) == 1 and errors[0].startswith("F:11: mqtt.hosts.0.port: Input should be greater than or "
                                                     "equal to 1"), errors


def test_host_and_hosts_together_and_a_broker_listed_twice(tmp_path: Path) -> None:
    assert _errors(tmp_path, "  device_id: line1-box\n  host: mqtt-a\n  hosts: [mqtt-b]") == [
        "F:9: mqtt.host: give either host (one broker) or hosts (a failover list), not both"]
    assert _errors(tmp_path, "  device_id: line1-box\n  port: 1884\n  hosts:\n    - mqtt-a\n    - mqtt-a:1884") == [
        "F:12: mqtt.hosts.1: broker mqtt-a:1884 is listed twice (entries 0 and 1); each broker once, in order of "
        "preference"]
    assert _errors(tmp_path, "  device_id: line1-box\n  hosts: []")[0].startswith("F:9: mqtt.hosts: List should "
                                                                              "have at least 1 item")


def test_websockets_on_the_plain_mqtt_port_is_caught_for_any_entry(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "  device_id: line1-box\n  transport: websockets\n  port: 9001\n"
                               "  hosts: [mqtt-a, 'mqtt-b:1883']")
    assert len(errors) == 1 and "transport 'websockets' on port 1883" in errors[0], errors


def test_check_config_prints_file_line_for_a_bad_hosts_entry(tmp_path: Path) -> None:
    path = tmp_path / "appliance.yaml"
    path.write_text(CONFIG % "  device_id: line1-box\n  hosts:\n    - mqtt-a:1883\n    - mqtt-b:88833")
    result = run_appliance("check-config", "--no-machine", str(path), expect=1)
    assert (f"{path}:11: mqtt.hosts.1: 'mqtt-b:88833': the port must be a number from 1 to 65535, not '88833'"
            in result.stderr), result.stderr
    assert "Traceback" not in result.stderr
    path.write_text(CONFIG % "  device_id: line1-box\n  hosts: [mqtt-a, 'mqtt-b:1884']")
    result = run_appliance("check-config", "--no-machine", str(path))
    assert "brokers mqtt-a:1883, mqtt-b:1884" in result.stdout, result.stdout
