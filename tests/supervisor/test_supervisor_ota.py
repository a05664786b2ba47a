"""OTA through the real daemon: `appliance run` as a process, a real broker, the real detector and a camera playing
real images. A signed bundle (the same detector with other thresholds, as version "2") is pushed in chunks over
MQTT; ota/status must reach `active`, detections must switch to version 2 with no long gap, the daemon must stop
cleanly, and after a restart it must serve version 2 again (the active pointer survives). The restarted daemon then
gets a bundle signed with a key it does not trust, sent by the real `appliance ota push` CLI (rejected,
`unknown_key`: version 2 serves on, /metrics says so), and the `rollback` action (back to the base model)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli import appliance_argv, appliance_env, run_appliance
from support.daemon import device_of, make_camera_dir, write_config
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.schemas import validate_message
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.harness.bundle import detector_bundle
from appliance.harness.notify import NotifySocket
from appliance.harness.processes import children_of, running
from appliance.ota.signing import generate_keypair
from appliance.ota.status import STATES, OtaStatus
from appliance.ota.store import OtaStore

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]

MAX_GAP_S = 3.0  # the camera runs at 4 fps: 0.25 s between frames when nothing stalls


def _timed(sub: Subscriber, kind: str, since: float = 0.0) -> list[tuple[float, dict[str, Any]]]:
    """(arrival time, payload) of every ``kind`` message that arrived at or after ``since``."""
    return [(m.at, m.json()) for m in sub.messages_of_type(kind, since)]


def _wait(predicate: Any, timeout: float, daemon: subprocess.Popen, log: Path) -> None:
    """Poll ``predicate`` until it holds; fail with the log's tail if the daemon exits or time runs out."""
    def alive_and_done() -> Any:
        assert daemon.poll() is None, f"the daemon exited with code {daemon.returncode}"
        return predicate()

    try:
        wait_until(alive_and_done, timeout, 0.1, "the condition on the daemon's messages")
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{log.read_text()[-3000:]}") from None


def _bundle(tmp_path: Path, private_key: Path, version: str = "2") -> Path:
    return detector_bundle(tmp_path, private_key, version)


def _ota_cli(*args: str, refused: bool = False, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    """The real `appliance ota` command line, as an operator runs it; ``refused``: the device refuses it (its
    reply, or the update's verdict)."""
    done = run_appliance("ota", *args, timeout=timeout, expect=None)
    if refused:
        assert done.returncode == 1 and done.stderr.startswith("refused: "), (done.stdout, done.stderr)
    else:
        assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def _ota_gauge(health_port: int) -> dict[str, float]:
    """appliance_ota_state by state, from the daemon's /metrics."""
    text = get(f"http://127.0.0.1:{health_port}/metrics", expect=200).text
    family = next(f for f in text_string_to_metric_families(text) if f.name == "appliance_ota_state")
    return {s.labels["state"]: s.value for s in family.samples}


def _retained(broker: Mosquitto, topic: str, timeout: float = 10.0) -> dict[str, Any]:
    """The retained message a new subscriber gets on ``topic``."""
    with Subscriber(broker, topic) as sub:
        got = sub.wait_for(lambda ms: [m.json() for m in ms if m.retain], timeout, f"a retained message on {topic}")
    return got[0]


def _gaps(arrivals: list[float]) -> list[float]:
    return [b - a for a, b in zip(arrivals, arrivals[1:])]


class _Poller:
    """GETs /livez and /healthz every 100 ms on a thread until ``stop()``: what an orchestrator's probes see."""

    def __init__(self, health_port: int) -> None:
        self.codes: dict[str, list[int]] = {"livez": [], "healthz": []}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(f"http://127.0.0.1:{health_port}",), daemon=True)
        self._thread.start()

    def _run(self, url: str) -> None:
        while not self._done.wait(0.1):
            for path, codes in self.codes.items():
                codes.append(get(f"{url}/{path}", timeout=5).status)

    def stop(self) -> dict[str, list[int]]:
        self._done.set()
        self._thread.join(10)
        return self.codes


def _start(config: Path, notify: NotifySocket, log: Path) -> subprocess.Popen:
    env = appliance_env({"NOTIFY_SOCKET": str(notify.path), "PYTHONFAULTHANDLER": "1"})
    return subprocess.Popen(appliance_argv("run", "--config", str(config)), stdout=log.open("a"),
                            stderr=subprocess.STDOUT, env=env, cwd=REPO)


def _stop(daemon: subprocess.Popen, log: Path) -> list[int]:
    """SIGTERM; exit code 0; no model process left behind."""
    stubs = children_of(daemon.pid)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=90) == 0, log.read_text()[-3000:]
    wait_until(lambda: not [pid for pid in stubs if running(pid)], 5, 0.05, "the model processes to exit")
    return stubs


@dataclass
class _Device:
    """The device under test as its steps see it: its broker, what it published, its health port, its log."""

    tmp_path: Path
    broker: Mosquitto
    sub: Subscriber
    name: str
    health_port: int
    log: Path

    def push(self, *args: str, refused: bool = False, timeout: float = 150) -> subprocess.CompletedProcess[str]:
        return _ota_cli("push", *args, "--mqtt", f"127.0.0.1:{self.broker.port}", "--device", self.name,
                        refused=refused, timeout=timeout)


def _ended(sub: Subscriber, since: float) -> list[dict[str, Any]]:
    return [p for _t, p in _timed(sub, "ota_status", since) if p["state"] in ("active", "rolled_back", "rejected")]


def _the_interrupted_install_is_reported(dev: _Device, daemon: subprocess.Popen) -> None:
    _wait(lambda: [p for _t, p in _timed(dev.sub, "ota_status") if p.get("version") == "7"], 30, daemon, dev.log)
    interrupted = [p for _t, p in _timed(dev.sub, "ota_status") if p.get("version") == "7"]
    assert [(p["state"], p["code"]) for p in interrupted] == [("rejected", "interrupted")], interrupted
    validate_message("ota_status", interrupted[0])
    assert "building" in interrupted[0]["message"] and "base serves" in interrupted[0]["message"]
    _wait(lambda: len(_timed(dev.sub, "detections")) >= 3, 120, daemon, dev.log)
    assert {p["model"]["version"] for _t, p in _timed(dev.sub, "detections")} == {"base"}


def _the_update_switches_without_a_gap(dev: _Device, daemon: subprocess.Popen, bundle: Path) -> None:
    sub, log = dev.sub, dev.log
    t_push = time.monotonic()
    probes = _Poller(dev.health_port)
    pushed = dev.push(str(bundle), "--chunk-bytes", str(1 << 20), "--sign-key", str(dev.tmp_path / "ota.key"),
                      "--json", timeout=330)  # the bundle key signs commands too (default); it waits for the verdict
    verdict = json.loads(pushed.stdout)["verdict"]
    assert (verdict["state"], verdict["version"]) == ("active", "2"), pushed.stdout

    def outcome() -> list[dict[str, Any]]:
        return [p for _t, p in _timed(sub, "ota_status")
                if p.get("version") == "2" and p["state"] in ("active", "rolled_back", "rejected")]

    _wait(outcome, 300, daemon, log)
    t_done = time.monotonic()
    codes = probes.stop()  # the old version was unloaded before "active": the probes saw the whole switch
    assert len(codes["livez"]) > 20 and set(codes["livez"]) == {200}, codes["livez"]
    assert set(codes["healthz"]) == {200}, codes["healthz"]  # a model switch is not a failure
    assert outcome()[-1]["state"] == "active", outcome()
    states = [p["state"] for _t, p in _timed(sub, "ota_status")]
    for _t, p in _timed(sub, "ota_status"):
        validate_message("ota_status", p)
        assert p["device_id"] == dev.name
    for step in ("received", "verifying", "staging", "building", "switching", "checking", "watching", "active"):
        assert step in states, (step, states)
    _wait(lambda: any(p["model"]["version"] == "2" for _t, p in _timed(sub, "detections", t_done)), 30, daemon, log)
    arrivals = [t for t, _p in _timed(sub, "detections", t_push) if t <= t_done]
    gaps = _gaps(arrivals)
    print(f"\ndaemon OTA: {len(arrivals)} detections published during the update ({t_done - t_push:.1f} s); "
          f"longest gap {max(gaps) * 1000:.0f} ms")
    assert len(arrivals) > 10 and max(gaps) < MAX_GAP_S, (max(gaps), log.read_text()[-3000:])
    # once switched, every frame comes from version 2 (never back to base)
    versions = [p["model"]["version"] for _t, p in _timed(sub, "detections", t_push)]
    first = versions.index("2")
    assert set(versions[first:]) == {"2"} and set(versions[:first]) <= {"base"}


def _an_untrusted_bundle_is_rejected(dev: _Device, restarted: subprocess.Popen, rogue: Path) -> None:
    """A bundle signed with an untrusted key, pushed by the CLI (the commands signed by the operator's key):
    rejected, version 2 serves on without a gap."""
    sub, log = dev.sub, dev.log
    t_rogue = time.monotonic()
    pushed = dev.push(str(rogue), "--chunk-bytes", str(1 << 20), "--sign-key", str(dev.tmp_path / "ota.key"),
                      refused=True)
    assert "rejected (unknown_key)" in pushed.stderr, pushed.stderr  # the device's verdict, exit 1
    _wait(lambda: _ended(sub, t_rogue), 60, restarted, log)
    t_rejected = time.monotonic()
    rejected = _ended(sub, t_rogue)
    assert [(p["state"], p.get("code")) for p in rejected] == [("rejected", "unknown_key")], rejected
    assert "version" not in rejected[0] and rejected[0]["request_id"].startswith("push-"), rejected[0]
    for _t, p in _timed(sub, "ota_status", t_rogue):
        validate_message("ota_status", p)
    retained = _retained(dev.broker, f"appliance/{dev.name}/ota/status")
    validate_message("ota_status", retained)
    assert (retained["state"], retained["code"]) == ("rejected", "unknown_key"), retained
    assert _ota_gauge(dev.health_port) == {s: 1.0 if s == "rejected" else 0.0 for s in STATES}
    _wait(lambda: len(_timed(sub, "detections", t_rejected)) >= 3, 30, restarted, log)
    across = _timed(sub, "detections", t_rogue)
    assert {p["model"]["version"] for _t, p in across} == {"2"}
    assert max(_gaps([t for t, _p in across])) < MAX_GAP_S, log.read_text()[-3000:]


def _an_unsigned_rollback_is_refused(dev: _Device, restarted: subprocess.Popen) -> None:
    """The CLI fails with the device's reason, and nothing rolls back."""
    t_unsigned = time.monotonic()
    unsigned = dev.push("--action", "rollback", refused=True)
    assert "(unsigned)" in unsigned.stderr and "--sign-key" in unsigned.stderr, unsigned.stderr
    assert _ended(dev.sub, t_unsigned) == [] and "Traceback" not in unsigned.stderr
    _wait(lambda: [p for _t, p in _timed(dev.sub, "health", t_unsigned)
                   if p["mqtt"]["commands_refused"]["unsigned"] == 1], 30, restarted, dev.log)
    validate_message("health", _timed(dev.sub, "health", t_unsigned)[-1][1])


def _a_signed_rollback_goes_back_to_base(dev: _Device, restarted: subprocess.Popen) -> None:
    """The signed `rollback` action (the CLI sends {"action": "rollback"} with `auth`): back to the base model,
    no long gap."""
    sub, log = dev.sub, dev.log
    t_rollback = time.monotonic()
    done = dev.push("--action", "rollback", "--sign-key", str(dev.tmp_path / "ota.key"), "--reply-timeout", "120")
    assert json.loads(done.stdout) == {"state": "rolled_back", "from": "2", "to": None}, done.stdout
    _wait(lambda: _ended(sub, t_rollback), 120, restarted, log)
    rolled = _ended(sub, t_rollback)
    assert [(p["state"], p.get("code")) for p in rolled] == [("rolled_back", "manual")], rolled
    validate_message("ota_status", rolled[0])
    assert "version" not in rolled[0], rolled[0]  # absent: the base model serves

    def replies() -> list[dict[str, Any]]:  # the reply follows the status: the handler returns after it
        return [p for _t, p in _timed(sub, "command_reply", t_rollback) if p["command"] == "ota"]

    _wait(replies, 30, restarted, log)
    validate_message("command_reply", replies()[0])
    assert [(r["ok"], r.get("result")) for r in replies()] == [(True, {"state": "rolled_back", "from": "2",
                                                                       "to": None})], replies()
    _wait(lambda: any(p["model"]["version"] == "base" for _t, p in _timed(sub, "detections", t_rollback)),
          30, restarted, log)
    t_base = time.monotonic()
    _wait(lambda: len(_timed(sub, "detections", t_base)) >= 3, 30, restarted, log)
    assert _ota_gauge(dev.health_port) == {s: 1.0 if s == "rolled_back" else 0.0 for s in STATES}
    across = _timed(sub, "detections", t_rollback)
    versions = [p["model"]["version"] for _t, p in across]
    first = versions.index("base")
    assert set(versions[first:]) == {"base"} and set(versions[:first]) <= {"2"}, versions
    gaps = _gaps([t for t, _p in across])
    print(f"rejection and rollback: {len(across)} detections across the rollback, longest gap "
          f"{max(gaps) * 1000:.0f} ms")
    assert max(gaps) < MAX_GAP_S, log.read_text()[-3000:]
    status = json.loads(dev.push("--action", "status").stdout)  # an unsigned status is answered
    assert (status["active"], status["serving"]) == (None, "yolov3-tiny@base"), status


def test_ota_update_through_the_daemon_switches_without_a_gap_and_survives_a_restart(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> None:
    camera_dir = make_camera_dir(tmp_path)
    generate_keypair(tmp_path / "ota.key", tmp_path / "ota.pub")
    bundle = _bundle(tmp_path, tmp_path / "ota.key")
    generate_keypair(tmp_path / "rogue.key", tmp_path / "rogue.pub")  # a key the device does not trust
    rogue = _bundle(tmp_path, tmp_path / "rogue.key", version="3")
    config = write_config(tmp_path, broker, shm_root, camera_dir, engine_seed=engine_seed)
    health_port = free_port()
    config.write_text(config.read_text().replace("health:\n  port: 0\n", f"health:\n  port: {health_port}\n")
                      .replace("mqtt:\n", "mqtt:\n  health_interval_s: 2\n"))  # the refusal count, soon
    with config.open("a") as f:
        f.write(f"ota:\n  trusted_keys: [{tmp_path / 'ota.pub'}]\n"
                "  health: {period_s: 4, check_interval_s: 0.2, min_requests: 3, max_latency_ratio: 50}\n")
    device = device_of(config)
    log = tmp_path / "daemon.log"
    notify = NotifySocket(tmp_path / "notify.sock")
    # the journal of an install that a power cut stopped while building version 7 (written as OtaManager does)
    OtaStore(tmp_path / "state").write_journal(
        OtaStatus("building", "building", "7", "yolov3-tiny", percent=40.0, time=time.time()).to_dict())
    sub = Subscriber(broker, f"appliance/{device}/#")
    dev = _Device(tmp_path, broker, sub, device, health_port, log)
    daemon = _start(config, notify, log)
    restarted: subprocess.Popen | None = None
    try:
        assert notify.wait_for("READY=1", 240), log.read_text()[-3000:]
        _the_interrupted_install_is_reported(dev, daemon)
        _the_update_switches_without_a_gap(dev, daemon, bundle)
        _stop(daemon, log)

        # a restart serves the active version again
        notify.messages.clear()
        t_restart = time.monotonic()
        restarted = _start(config, notify, log)
        assert notify.wait_for("READY=1", 240), log.read_text()[-3000:]
        _wait(lambda: len(_timed(sub, "detections", t_restart)) >= 2, 120, restarted, log)
        assert {p["model"]["version"] for _t, p in _timed(sub, "detections", t_restart)} == {"2"}

        _an_untrusted_bundle_is_rejected(dev, restarted, rogue)
        _an_unsigned_rollback_is_refused(dev, restarted)
        _a_signed_rollback_goes_back_to_base(dev, restarted)
        _stop(restarted, log)
    finally:
        for proc in (daemon, restarted):
            if proc is not None and proc.poll() is None:
                for pid in children_of(proc.pid):  # Triton's model stubs outlive a killed parent
                    os.kill(pid, signal.SIGKILL)
                proc.kill()
                proc.wait()
        sub.close()
        notify.close()
    assert list(shm_root.iterdir()) == []
