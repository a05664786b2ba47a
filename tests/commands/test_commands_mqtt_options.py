"""The broker options every MQTT command takes (appliance/commands/mqttoptions.py), through the real
`appliance ota push` against a real mosquitto TLS listener that requires a client certificate and a password,
with a CA and certificates made at test time: mutual TLS with a password file or the environment, the whole
mqtt section from an appliance config, and each way it can go wrong failing with a sentence that names the fix
(exit code 2, nothing delivered)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from support.cli import run_appliance
from support.mosquitto import Mosquitto, TlsMaterial, issue_cert, make_ca, make_tls_material
from support.ports import free_port
from support.subscriber import Subscriber

PASSWORD = f"pw-{uuid.uuid4().hex}"


@pytest.fixture
def pki(tmp_path: Path) -> TlsMaterial:
    return make_tls_material(tmp_path / "pki")


@pytest.fixture
def broker(tmp_path: Path, pki: TlsMaterial) -> Iterator[Mosquitto]:
    with Mosquitto(tmp_path / "broker", tls=pki, require_certificate=True,
                   passwords={"operator@ops": PASSWORD}) as b:
        yield b


@pytest.fixture
def received(broker: Mosquitto, pki: TlsMaterial) -> Iterator[Subscriber]:
    """Every message, read over mutual TLS as the operator."""
    with Subscriber(broker, "#", tls=pki, username="operator@ops", password=PASSWORD) as sub:
        yield sub


def _push(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`appliance ota push --action status` without waiting for a reply; the password only from ``env``."""
    return run_appliance("ota", "push", "--action", "status", "--reply-timeout", "0", *args, env=env,
                         unset={"APPLIANCE_MQTT_PASSWORD"}, expect=None)


def _appliance_config(tmp_path: Path, mqtt_section: str) -> Path:
    """An appliance config with one camera and ``mqtt_section`` (indented YAML lines under ``mqtt:``)."""
    config = tmp_path / "appliance.yaml"
    config.write_text(f"""
device: {{id: box07}}
cameras:
  - id: line1
    source: {{type: images, path: {tmp_path}}}
    width: 640
    height: 480
    fps: 4
mqtt:{mqtt_section}""")
    return config


def _tls_args(broker: Mosquitto, ca: Path, cert: Path, key: Path) -> list[str]:
    return ["--mqtt", f"127.0.0.1:{broker.port}", "--ca", str(ca), "--cert", str(cert), "--key", str(key),
            "--username", "operator@ops", "--device", "dev1"]


def _delivered(received: Subscriber) -> list[tuple[str, bytes]]:
    return [(m.topic, m.payload) for m in list(received.messages)]


def _wait_for(received: Subscriber, n: int) -> None:
    received.wait_for(n, 15, f"{n} message(s) delivered")


def test_push_over_mutual_tls_with_a_password_file(tmp_path: Path, broker: Mosquitto, pki: TlsMaterial,
                                                   received: Subscriber) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    result = _push(*_tls_args(broker, pki.ca.cert, pki.client.cert, pki.client.key), "--password-file", str(secret))
    assert result.returncode == 0, result.stderr
    _wait_for(received, 1)
    assert [t for t, _p in _delivered(received)] == ["appliance/dev1/command/ota"]
    assert b'"args": {"action": "status"}' in received.messages[0].payload
    assert PASSWORD not in result.stdout + result.stderr


def test_the_mqtt_section_of_an_appliance_config_and_the_password_from_the_environment(
        tmp_path: Path, broker: Mosquitto, pki: TlsMaterial, received: Subscriber) -> None:
    config = _appliance_config(tmp_path, f"""
  host: 127.0.0.1
  port: {broker.port}
  topic_prefix: plant/line1
  client_id: appliance-box07
  username: operator@ops
  tls: {{ca: {pki.ca.cert}, cert: {pki.client.cert}, key: {pki.client.key}}}
""")
    result = _push("--config", str(config), env={"APPLIANCE_MQTT_PASSWORD": PASSWORD})
    assert result.returncode == 0, result.stderr
    _wait_for(received, 1)
    assert [t for t, _p in _delivered(received)] == ["plant/line1/box07/command/ota"]
    assert "appliance-box07" not in broker.log_path.read_text()  # never the device's own client id


@pytest.mark.parametrize("flag", [["--password", PASSWORD], [f"--password={PASSWORD}"]])
def test_a_password_on_the_command_line_is_refused_with_where_to_put_it(broker: Mosquitto, pki: TlsMaterial,
                                                                       received: Subscriber, flag: list[str]) -> None:
    result = _push(*_tls_args(broker, pki.ca.cert, pki.client.cert, pki.client.key), *flag)
    assert result.returncode == 2
    assert "--password is not accepted" in result.stderr
    assert "--password-file" in result.stderr and "APPLIANCE_MQTT_PASSWORD" in result.stderr
    assert PASSWORD not in result.stderr
    assert _delivered(received) == []


def test_failures_name_their_fix(tmp_path: Path, broker: Mosquitto, pki: TlsMaterial, received: Subscriber) -> None:
    other_ca = make_ca(tmp_path / "other", "other-ca")
    rogue = issue_cert(other_ca, tmp_path / "other", "rogue-client", server=False)
    good = _tls_args(broker, pki.ca.cert, pki.client.cert, pki.client.key)
    cases: list[tuple[list[str], dict[str, str], list[str]]] = [
        (_tls_args(broker, other_ca.cert, pki.client.cert, pki.client.key), {"APPLIANCE_MQTT_PASSWORD": PASSWORD},
         ["broker certificate", "failed verification", "check mqtt.tls.ca"]),
        (_tls_args(broker, pki.ca.cert, rogue.cert, rogue.key), {"APPLIANCE_MQTT_PASSWORD": PASSWORD},
         ["closed the connection before CONNACK", "rejected our TLS client certificate"]),
        (good, {"APPLIANCE_MQTT_PASSWORD": "wrong"},
         ["refused the connection", "check mqtt.username and the password"]),
        (good, {}, ["refused the connection"]),  # no password at all
        (good + ["--password-file", str(tmp_path / "missing")], {}, ["cannot read mqtt.password_file", "missing"]),
        (["--mqtt", f"127.0.0.1:{broker.port}", "--device", "dev1"], {}, ["configure mqtt.tls"]),  # plain on TLS
        (["--mqtt", "127.0.0.1:notaport", "--device", "dev1"], {}, ["expected HOST or HOST:PORT"]),
        (good[:2] + ["--cert", str(pki.client.cert), "--device", "dev1"], {},
         ["tls.cert and tls.key must be given together"]),
    ]
    for args, env, expected in cases:
        result = _push(*args, env=env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        for text in expected:
            assert text in result.stderr, (args, text, result.stderr)
        assert "Traceback" not in result.stderr
    assert _delivered(received) == []


def test_a_config_with_mqtt_hosts_reaches_the_first_broker_that_answers(
        tmp_path: Path, broker: Mosquitto, pki: TlsMaterial, received: Subscriber) -> None:
    down_port = free_port()  # nothing listens there: the first broker of the list is down
    config = _appliance_config(tmp_path, f"""
  hosts: ["127.0.0.1:{down_port}", "127.0.0.1:{broker.port}"]
  username: operator@ops
  tls: {{ca: {pki.ca.cert}, cert: {pki.client.cert}, key: {pki.client.key}}}
""")
    result = _push("--config", str(config), env={"APPLIANCE_MQTT_PASSWORD": PASSWORD})
    assert result.returncode == 0, result.stderr
    _wait_for(received, 1)
    assert [t for t, _p in _delivered(received)] == ["appliance/box07/command/ota"]
