"""`appliance run` whose health port is taken: it starts anyway, says so, publishes health over MQTT, and takes
the port once it is free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from support.daemon import RunningDaemon, device_of, make_camera_dir, write_config
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("detector_onnx", "darknet_images")]


def _healthz(port: int) -> dict | None:
    try:
        return dict(get(f"http://127.0.0.1:{port}/healthz", timeout=5).json())
    except OSError:
        return None


def test_a_taken_health_port_does_not_stop_the_appliance(tmp_path: Path, broker: Mosquitto, shm_root: Path,
                                                         engine_seed: Path) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    config = write_config(tmp_path, broker, shm_root, make_camera_dir(tmp_path), health_port=port,
                          engine_seed=engine_seed)
    # health over MQTT every 2 s, not the default 30 s: the test waits for the first one
    config.write_text(config.read_text().replace("mqtt:\n", "mqtt:\n  health_interval_s: 2\n"))
    subscriber = Subscriber(broker, f"appliance/{device_of(config)}/#")
    daemon = RunningDaemon(tmp_path, config, REPO)
    try:
        assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
        daemon.wait(lambda: subscriber.of_type("health"), 60, "health over MQTT")
        assert f"cannot listen on 127.0.0.1:{port}" in daemon.log_path.read_text()
        blocker.close()
        daemon.wait(lambda: _healthz(port), 30, "/healthz once the port is free")
        assert f"listening on 127.0.0.1:{port} now" in daemon.log_path.read_text()
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        blocker.close()
        daemon.close()
        subscriber.close()
