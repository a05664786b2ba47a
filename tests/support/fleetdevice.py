"""One fleet device for the rollout tests, in its own process: ``python fleetdevice.py CONFIG.json``.

The lightest real OTA path (docs/fleet-rollout.md, "Tests"; `appliance run` daemons are in
tests/supervisor/test_supervisor_rollout.py): the real MqttPublisher (retained status naming the
group, retained ota/status, periodic health, the ``ota`` command for rollbacks), the real OtaManager (verify,
stage, ONNX Runtime build, golden frames through the built model, switch, health watch) on the OfflineSwitcher
instead of an embedded Triton, and the real desired-state follower, wired by ``follow_group`` as ``appliance run``
wires it. Runs until SIGTERM. CONFIG: {"state_dir", "mqtt": MqttConfig fields, "ota": OtaConfig fields}.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from appliance import logs
from appliance.detector.serving.switcher import ModelSpec
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.messages import ota_status_payload
from appliance.mqtt.publisher import MqttPublisher
from appliance.ota.commandsig import signature_check
from appliance.ota.config import OtaConfig
from appliance.ota.delivery import OtaCommandHandler, is_read_only
from appliance.ota.follower import follow_group
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.signing import TrustedKeys
from appliance.ota.status import OtaStatus


def main(config_path: str) -> int:
    logs.configure("INFO", environ={})  # to stderr (the test's log file): the tests read the follower's decisions
    cfg: dict[str, Any] = json.loads(Path(config_path).read_text())
    state = Path(cfg["state_dir"])
    state.mkdir(parents=True, exist_ok=True)
    mqtt, ota = MqttConfig(**cfg["mqtt"]), OtaConfig(**cfg["ota"])
    trusted = TrustedKeys.from_paths(ota.trusted_keys)  # operator keys default to the bundle keys, as in the daemon
    publisher = MqttPublisher(mqtt, state / "spool.sqlite3", group=ota.group, signature_check=signature_check(trusted),
                              nonce_path=state / "mqtt-command-nonces.log")

    def on_status(status: OtaStatus) -> None:
        publisher.publish_device_event("ota/status", ota_status_payload(mqtt.device_id, status.to_dict()),
                                       retain=True)

    manager = OtaManager(state, trusted, OfflineSwitcher(), config=ota,
                         status_cb=on_status, base_spec=lambda: ModelSpec(None, None, None))  # type: ignore[arg-type]
    manager.start_serving()
    incoming = state / "ota" / "incoming"
    # Before connecting: a command the broker kept for this device's session while it was away (a rollback sent
    # to a device that went offline) arrives right after the connect and must find its handler.
    publisher.on_command("ota", OtaCommandHandler(manager, ota, incoming), read_only=is_read_only)
    publisher.start()
    follower = follow_group(publisher, manager, ota, incoming)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    if follower is not None:
        follower.stop()
    publisher.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
