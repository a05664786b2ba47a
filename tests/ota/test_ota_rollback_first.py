"""An emergency rollback is not held up by slow work: through a real mosquitto and the real publisher, a signed
rollback sent while a bundle trickles in from a real HTTP server, or while an engine build is under way, runs
within a bounded time, and the update it interrupted never becomes active (``cancelled`` on ota/status)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.bundleserver import Server
from support.mosquitto import Mosquitto
from support.wait import wait_until

from appliance.detector.engines.builders.ort import OnnxRuntimeBuilder
from appliance.detector.serving.switcher import ModelSpec
from appliance.fleet.push import push_mqtt
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.publisher import MqttPublisher
from appliance.ota.commandsig import signature_check
from appliance.ota.config import HealthPolicy, OtaConfig
from appliance.ota.delivery import OtaCommandHandler, is_read_only
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.signing import load_private_key

ROLLBACK = {"action": "rollback"}


class HeldBuilder(OnnxRuntimeBuilder):
    """The real ONNX Runtime builder, held inside build() while ``hold`` is set, as a long engine build is."""

    def __init__(self) -> None:
        self.hold = False
        self.building = threading.Event()
        self.release = threading.Event()

    def build(self, *args: Any, **kwargs: Any) -> dict[str, object]:
        if self.hold:
            self.building.set()
            self.release.wait(120)
        return super().build(*args, **kwargs)


class Device:
    """A real OtaManager (OfflineSwitcher) behind the real `ota` command on a real publisher, version 1 active."""

    def __init__(self, broker: Mosquitto, tmp_path: Path, keys: Any, v1: Path, rollback_wait_s: float) -> None:
        self.events: list[Any] = []
        self.builder = HeldBuilder()
        cfg = OtaConfig(health=HealthPolicy(period_s=0), allow_http=True, rollback_wait_s=rollback_wait_s)
        state = tmp_path / "state"
        self.manager = OtaManager(state, keys.trusted(), OfflineSwitcher(), config=cfg, status_cb=self.events.append,
                                  base_spec=lambda: ModelSpec(None, None, None),  # type: ignore[arg-type]
                                  builder=self.builder)
        self.manager.start_serving()
        assert self.manager.install(v1)["state"] == "active"
        self.handler = OtaCommandHandler(self.manager, cfg, state / "ota" / "incoming")
        self.mqtt = MqttConfig(host=broker.host, port=broker.port, device_id="dev1", topic_prefix="plant")
        self.publisher = MqttPublisher(self.mqtt, state / "spool.sqlite3", nonce_path=state / "nonces.log",
                                       signature_check=signature_check(keys.trusted()))
        self.results: list[dict[str, Any]] = []  # what the handler answered, in order
        self.publisher.on_command("ota", self._answer, read_only=is_read_only)
        self.publisher.start()
        self.key = load_private_key(keys.private)

    def _answer(self, command: Any) -> dict[str, Any]:
        result = self.handler(command)
        self.results.append(result)
        return result

    def send(self, args: dict[str, Any], reply_timeout_s: float) -> None:
        """A signed `ota` command from an operator's CLI; with a reply timeout, fails unless an ok reply came."""
        cli = MqttConfig(host=self.mqtt.host, port=self.mqtt.port, device_id="operator")
        push_mqtt(cli, "dev1", "plant", [args], sign_key=self.key, reply_timeout_s=reply_timeout_s)

    def states(self) -> list[tuple[str, str | None]]:
        return [(e.state, e.code) for e in self.events]


@pytest.fixture
def device(request, broker, tmp_path, keys, sign, tiny_source) -> Iterator[Device]:  # type: ignore[no-untyped-def]
    wait_s = getattr(request, "param", 1.0)  # rollback_wait_s
    dev = Device(broker, tmp_path, keys, sign(tiny_source("1"), "1.bundle"), wait_s)
    assert dev.publisher.wait_connected(20)
    try:
        yield dev
    finally:
        dev.builder.release.set()
        dev.handler.join(60)
        dev.publisher.stop()


def rolled_back_promptly(device: Device) -> float:
    """Send the signed rollback and wait for its ok reply; returns how long that took."""
    started = time.monotonic()
    device.send(ROLLBACK, reply_timeout_s=20)
    took = time.monotonic() - started
    assert device.manager.store.serving() is None and ("rolled_back", "manual") in device.states()
    return took


def test_a_rollback_during_a_trickling_download_runs_and_cancels_that_update(device, http_server: Server, sign,
                                                                             tiny_source) -> None:
    url = http_server.publish(sign(tiny_source("2"), "2.bundle")).replace("/files/", "/trickle/")
    device.send({"url": url}, reply_timeout_s=20)  # accepted at once: the download runs on its own worker
    assert http_server.trickling.wait(20)
    took = rolled_back_promptly(device)
    print(f"rollback during a trickling download: ok reply after {took:.2f} s")
    assert took < 10, took  # the bundle alone would take hours at a byte per 0.2 s
    http_server.release.set()  # the rest of the bundle arrives; the update asked for before the rollback stops
    wait_until(lambda: ("rejected", "cancelled") in device.states(), message="the download's update cancelled")
    assert device.manager.store.serving() is None


def test_a_rollback_during_an_engine_build_goes_ahead_of_it(device, sign, tiny_source, caplog) -> None:
    device.builder.hold = True
    device.send({"path": str(sign(tiny_source("2"), "2.bundle"))}, reply_timeout_s=20)
    assert device.builder.building.wait(30)
    with caplog.at_level(logging.WARNING, logger="appliance.ota"):
        took = rolled_back_promptly(device)
    print(f"rollback during an engine build: ok reply after {took:.2f} s")
    assert took < 10, took  # rollback_wait_s is 1 s; the build is held until after the reply
    assert "rollback goes ahead of the update" in caplog.text
    assert device.results[-1] == {"state": "rolled_back", "from": "1", "to": None, "superseded": "2"}
    device.builder.release.set()
    wait_until(lambda: ("rejected", "cancelled") in device.states(), message="the build's update cancelled")
    assert device.manager.store.serving() is None and "2" not in device.manager.store.installed()


@pytest.mark.parametrize("device", [60.0], indirect=True)
def test_an_update_that_reaches_its_next_step_in_time_is_cancelled_and_the_rollback_says_so(device, sign,
                                                                                            tiny_source) -> None:
    device.builder.hold = True
    device.send({"path": str(sign(tiny_source("2"), "2.bundle"))}, reply_timeout_s=20)
    assert device.builder.building.wait(30)
    result: list[dict[str, Any]] = []
    rollback = threading.Thread(target=lambda: result.append(device.manager.rollback("r-cancel")))
    rollback.start()
    wait_until(lambda: device.manager.rollbacks() == 1, message="the rollback to be asked for")
    device.builder.release.set()  # the build ends well within rollback_wait_s; the update stops after it
    rollback.join(60)
    assert result and result[0]["state"] == "rolled_back" and result[0]["to"] is None, result
    assert result[0]["cancelled"] == "2" and "superseded" not in result[0], result
    states = device.states()
    assert states.index(("rejected", "cancelled")) < states.index(("rolled_back", "manual"))
    assert device.manager.store.serving() is None and "2" not in device.manager.store.installed()
