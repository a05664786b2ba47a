"""`appliance run` as a real process under the shipped least-privilege ACL (docs/examples/mosquitto/acl) on a
real mosquitto that requires mutual TLS and a password, with the real detector on real images:

- it works fully: detections, device status, health, and a reply to an operator's command;
- a subscriber (read-only role) cannot command it, and another device cannot publish as it nor command it
  (MQTT 3.1.1: the broker drops a denied publish silently, so this is asserted on what a reader receives);
- its secrets stay secret: neither the MQTT password (from password_file) nor the body of its TLS client key
  appears in its log (DEBUG level, stdout and stderr), /metrics, /healthz, any MQTT message it publishes, or the
  output of `appliance status` (text and --json)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Callable

import pytest
from support.cli import run_appliance
from support.daemon import RunningDaemon, make_camera_dir
from support.engineseed import seed_state_dir
from support.httpclient import get
from support.mosquitto import Mosquitto, TlsMaterial, make_tls_material, publish_as, shipped_acl
from support.ports import free_port
from support.schemas import validate_message
from support.subscriber import Subscriber

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


def _status(*args: str) -> str:
    done = run_appliance("status", *args, expect=None)
    assert done.returncode in (0, 1), done.stderr  # 1: not healthy is still an answer
    return done.stdout + done.stderr


def _write_config(tmp_path: Path, shm_root: Path, device: str, pki: TlsMaterial, health_port: int) -> Path:
    """One camera; MQTT over mutual TLS as ``device`` with its password file; the broker's port left as
    ``{port}``, filled in once the broker runs."""
    config = tmp_path / "appliance.yaml"
    config.write_text(f"""
device: {{id: {device}}}
paths:
  state_dir: {tmp_path / 'state'}
  shm_root: {shm_root}
cameras:
  - id: line1
    source: {{type: images, path: {make_camera_dir(tmp_path)}, loop: true, realtime: true}}
    width: 640
    height: 480
    resize: true
    fps: 4
mqtt:
  host: 127.0.0.1
  port: {{port}}
  username: {device}
  password_file: {tmp_path / 'mqtt-password'}
  tls: {{ca: {pki.ca.cert}, cert: {pki.client.cert}, key: {pki.client.key}}}
  health_interval_s: 2
health:
  port: {health_port}
""")
    return config


def _check_the_acl(broker: Mosquitto, reader: Subscriber, secrets: dict[str, str], pki: TlsMaterial,
                   device: str, wait: Callable[[Callable[[], object], float, str], None]) -> None:
    """Commands and messages from who may not send them go nowhere; the operator's command is answered."""
    def replies(request_id: str) -> list[dict]:
        return [r for r in reader.of_type("command_reply") if r.get("request_id") == request_id]

    def as_user(user: str, topic: str, payload: dict) -> None:
        publish_as(broker, user, secrets[user], topic, json.dumps(payload), tls=pki)

    # Denied first, allowed last. Each as_user returns once the broker has handled its message (routed to
    # every subscriber when allowed), so the reader's one connection would get a forged message before the
    # barrier, and the device a denied command before the operator's on the same topic; the device answers
    # commands in order on one connection, so the operator's reply is the sentinel for theirs.
    base = f"appliance/{device}"
    as_user("dashboard@ops", f"{base}/command/status", {"request_id": "from-subscriber"})
    as_user("other-box", f"{base}/command/status", {"request_id": "from-other-device"})
    as_user("other-box", f"{base}/status", {"type": "device_status", "marker": "forged"})
    as_user("other-box", f"{base}/line1/detections", {"type": "detections", "marker": "forged"})
    as_user("operator@ops", f"{base}/command/status", {"request_id": "from-operator"})
    as_user("other-box", "appliance/other-box/status", {"type": "barrier"})
    wait(lambda: replies("from-operator") and reader.of_type("barrier"), 60, "the operator's reply")
    reply = replies("from-operator")[0]
    validate_message("command_reply", reply)
    assert reply["ok"] is True, reply
    assert replies("from-subscriber") == [] and replies("from-other-device") == []
    assert [p for p in reader.json_on() if p.get("marker") == "forged"] == []


def test_the_appliance_works_under_the_acl_and_keeps_its_secrets(tmp_path: Path, shm_root: Path,
                                                                engine_seed: Path) -> None:
    device = f"sec{uuid.uuid4().hex[:6]}"
    secrets = {device: f"pw-{uuid.uuid4().hex}", "other-box": f"pw-{uuid.uuid4().hex}",
               "operator@ops": f"pw-{uuid.uuid4().hex}", "dashboard@ops": f"pw-{uuid.uuid4().hex}"}
    pki = make_tls_material(tmp_path / "pki")
    (tmp_path / "mqtt-password").write_text(secrets[device] + "\n")
    health_port = free_port()
    config = _write_config(tmp_path, shm_root, device, pki, health_port)
    broker = Mosquitto(tmp_path / "broker", tls=pki, require_certificate=True, passwords=secrets,
                       extra_config=[f"acl_file {shipped_acl(tmp_path / 'acl', [device])}"]).start()
    config.write_text(config.read_text().replace("{port}", str(broker.port)))
    reader = Subscriber(broker, "appliance/#", tls=pki, username="dashboard@ops",
                        password=secrets["dashboard@ops"])
    seed_state_dir(tmp_path / "state", engine_seed)
    daemon = RunningDaemon(tmp_path, config, REPO, global_args=["--log-level", "DEBUG"])
    wait = daemon.wait
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        wait(lambda: len(reader.of_type("detections")) >= 3, 120, "detections under the ACL")
        wait(lambda: reader.of_type("health"), 30, "health under the ACL")
        statuses = reader.of_type("device_status")
        assert statuses and statuses[-1]["state"] == "online", statuses
        _check_the_acl(broker, reader, secrets, pki, device, wait)

        exposed = {"/metrics": get(f"http://127.0.0.1:{health_port}/metrics", expect=200).text,
                   "/healthz": get(f"http://127.0.0.1:{health_port}/healthz", expect=200).text,
                   "appliance status": _status("--url", f"http://127.0.0.1:{health_port}"),
                   "appliance status --json": _status("--url", f"http://127.0.0.1:{health_port}", "--json")}
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        reader.close()
        broker.stop()

    log = daemon.log_path.read_text()
    assert "MQTT connected to" in log and " lost (" not in log, log[-3000:]  # never dropped for a denied publish
    exposed["daemon log (stdout and stderr, DEBUG)"] = log
    exposed["MQTT messages"] = "\n".join([json.dumps(p) for p in reader.json_on()]
                                         + [m.payload.decode("latin-1") for m in reader.binary()])
    key_lines = [line for line in pki.client.key.read_text().splitlines() if line and not line.startswith("-----")]
    assert key_lines and secrets[device]
    for where, text in exposed.items():
        assert text, where
        assert secrets[device] not in text, f"the MQTT password appears in {where}"
        for line in key_lines:
            assert line not in text, f"the TLS client key appears in {where}"
