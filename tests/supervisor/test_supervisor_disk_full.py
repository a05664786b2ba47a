"""`appliance run` with its state dir on a real small filesystem (a tmpfs), filled during a broker outage: the
appliance keeps running and says so (degraded with "disk full" on /readyz, /healthz and `appliance status`, /livez
still 200), every `message_seq` gap a subscriber sees is covered by a `gap` record whose counts sum to the dropped
counter, everything kept arrives in order once space and the broker return, and the level goes back to ok. The
log stays a handful of lines, also under 1,000 refused commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_appliance
from support.daemon import RunningDaemon, device_of, make_camera_dir, write_config
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.mqttdocs import subscriber_check
from support.ports import free_port
from support.smalldisk import fill, small_tmpfs
from support.subscriber import Subscriber

from appliance.commands.status import fetch_health

REPO = Path(__file__).resolve().parents[2]
MB = 1024 * 1024

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("detector_onnx", "darknet_images")]


def _log_lines(daemon: RunningDaemon, since: int) -> list[str]:
    """The daemon's WARNING and ERROR lines (a traceback's lines count too) after the first ``since`` lines."""
    lines = daemon.log_path.read_text().splitlines()[since:]
    return [line for line in lines if " WARNING " in line or " ERROR " in line or not line[:4].isdigit()]


def test_a_full_state_dir_is_counted_announced_and_recovered(tmp_path: Path, shm_root: Path,
                                                              engine_seed: Path) -> None:
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with small_tmpfs(tmp_path / "state", 128 * MB) as state:
        config = write_config(tmp_path, broker, shm_root, make_camera_dir(tmp_path), health_port=port,
                              engine_seed=engine_seed)
        text = config.read_text().replace(f"health:\n  port: {port}\n", f"health:\n  port: {port}\n  min_free_mb: 2\n")
        config.write_text(text.replace(f"  port: {broker.port}\n",
                                       f"  port: {broker.port}\n  spool: {{memory_bytes: 16384}}\n", 1))
        device = device_of(config)
        subscriber = Subscriber(broker, f"appliance/{device}/line1/detections", persistent=True)
        daemon = RunningDaemon(tmp_path, config, REPO)
        try:
            assert daemon.notify.wait_for("READY=1", 240), daemon.tail()
            daemon.wait(lambda: len(subscriber.json_on("")) >= 2, 120, "first detections")
            quiet_from = len(daemon.log_path.read_text().splitlines())
            broker.stop()  # the outage: results stay in the spool, which fills the disk
            filler = fill(state, 256 * 1024)

            def dropping() -> dict | None:
                health = fetch_health(url)
                return health if health["spool"]["results_dropped"] >= 3 else None

            daemon.wait(dropping, 120, "results dropped for the full disk")
            health = fetch_health(url)
            assert health["ok"] and health["level"] == "degraded", health  # it runs; it says what it cannot do
            assert any(r.startswith("disk full: ") for r in health["reasons"]), health["reasons"]
            assert (get(f"{url}/livez").status, get(f"{url}/readyz").status) == (200, 503)
            status = run_appliance("status", "--url", url, expect=None)
            assert status.returncode == 1 and "  - disk full: " in status.stdout, status.stdout
            assert health["inference"]["per_s"] > 0  # inference goes on; its results are what is held

            filler.unlink()  # space returns, then the broker
            broker.start()
            daemon.wait(lambda: fetch_health(url)["level"] == "ok", 60, "the level ok again")
            final = fetch_health(url)
            dropped = final["spool"]["results_dropped"]
            newest = max(m.get("message_seq", 0) for m in subscriber.json_on(""))
            daemon.wait(lambda: _accounted(subscriber) >= newest, 60, "every message up to the newest delivered")
            outage_lines = _log_lines(daemon, quiet_from)
            _flood_refused_commands(broker, device, daemon)
            assert daemon.terminate() == 0, daemon.tail()
        finally:
            daemon.close()
            subscriber.close()
            broker.stop()
    messages = subscriber.json_on("")
    assert subscriber_check()(messages) == []  # docs/mqtt.md's check: each gap announced, order kept
    gaps = [m for m in messages if m["type"] == "gap"]
    assert gaps and all(g["reason"] == "disk_full" for g in gaps)
    assert sum(g["count"] for g in gaps) == dropped  # one camera: the counter is its gaps
    assert len(outage_lines) < 12, outage_lines  # once when it starts, once when it ends; not a line a frame


def _accounted(subscriber: Subscriber) -> int:
    """How far message_seq is accounted for without a hole, by detections and gap records."""
    seen: set[int] = set()
    for m in subscriber.json_on(""):
        seen.update(range(m["first_message_seq"], m["last_message_seq"] + 1) if m["type"] == "gap"
                    else [m["message_seq"]])
    n = 0
    while n + 1 in seen:
        n += 1
    return n


def _flood_refused_commands(broker: Mosquitto, device: str, daemon: RunningDaemon) -> None:
    """1,000 unsigned rollbacks, each refused and answered: fewer than 20 log lines."""
    before = len(daemon.log_path.read_text().splitlines())
    with Subscriber(broker, f"appliance/{device}/reply") as replies:
        for i in range(1000):
            replies.client.publish(f"appliance/{device}/command/ota",
                                   json.dumps({"request_id": f"r{i}", "args": {"action": "rollback"}}), qos=1)
        daemon.wait(lambda: len(replies.messages) >= 1000, 120, "1,000 replies")
    assert {m.json()["error"]["code"] for m in replies.messages} == {"unsigned"}
    lines = daemon.log_path.read_text().splitlines()[before:]
    assert len(lines) < 20, lines[:40]
