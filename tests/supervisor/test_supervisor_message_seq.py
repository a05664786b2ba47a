"""A subscriber can prove it missed nothing: `appliance run` as a real process with two cameras, the real detector
and a real broker that goes away for 15 s. Per camera, `message_seq` arrives as 1..N with no gap, and each jump of
`seq` is the `frames_skipped` the message states (camera line2 publishes at a fixed rate below its fps, so frames
are skipped on purpose), checked with the very code docs/mqtt.md gives subscribers. The same run answers three
other promises of the docs: `model.hash` is the SHA-256 of the detector file Triton loaded (hashed here with
hashlib), the commands the running appliance knows are the ones docs/mqtt.md lists, and `STATUS=` reports a
current inference rate."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from pathlib import Path

import pytest
from support.daemon import RunningDaemon, make_camera_dir
from support.engineseed import seed_state_dir
from support.mosquitto import Mosquitto
from support.mqttdocs import documented_commands, subscriber_check
from support.schemas import validate_message
from support.subscriber import Subscriber

REPO = Path(__file__).resolve().parents[2]
OUTAGE_S = 15.0

pytestmark = [
    pytest.mark.slow,
    # fails, not skips, without the detector or the darknet images (tests/conftest.py)
    pytest.mark.usefixtures("detector_onnx", "darknet_images"),
]


def _config(tmp_path: Path, broker: Mosquitto, shm_root: Path, camera_dir: Path, device: str) -> Path:
    path = tmp_path / "appliance.yaml"
    cameras = "".join(f"""
  - id: {cam}
    source: {{type: images, path: {camera_dir}, loop: true, realtime: true}}
    width: 640
    height: 480
    resize: true
    fps: 4""" for cam in ("line1", "line2"))
    path.write_text(f"""
device: {{id: {device}}}
paths:
  state_dir: {tmp_path / 'state'}
  shm_root: {shm_root}
cameras:{cameras}
mqtt:
  host: 127.0.0.1
  port: {broker.port}
  backoff: {{initial_s: 0.2, max_s: 1, jitter: 0}}
  cameras:
    line2: {{mode: fixed_rate, rate_hz: 1.5}}
health:
  port: 0
""")
    return path


def _detections(subscriber: Subscriber) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {"line1": [], "line2": []}
    for message in subscriber.of_type("detections"):
        found[message["camera_id"]].append(message)
    return found


def test_message_seq_is_contiguous_across_a_broker_outage_and_seq_gaps_are_the_skipped_frames(
        tmp_path: Path, shm_root: Path, engine_seed: Path) -> None:
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    device = f"seq{uuid.uuid4().hex[:6]}"
    config = _config(tmp_path, broker, shm_root, make_camera_dir(tmp_path), device)
    seed_state_dir(tmp_path / "state", engine_seed)
    subscriber = Subscriber(broker, f"appliance/{device}/#", persistent=True)
    daemon = RunningDaemon(tmp_path, config, REPO)
    wait, notify = daemon.wait, daemon.notify

    try:
        assert notify.wait_for("READY=1", 240), daemon.tail()
        wait(lambda: min(map(len, _detections(subscriber).values())) >= 4, 120, "first detections")
        # The running appliance's command registry, as any client sees it: the reply to an unknown command.
        subscriber.client.publish(f"appliance/{device}/command/no-such-command", json.dumps({"request_id": "q1"}),
                                  qos=1)
        wait(lambda: any(r["request_id"] == "q1" for r in subscriber.of_type("command_reply")), 30, "a reply")

        broker.stop()
        outage_start_ms = time.time() * 1000
        time.sleep(OUTAGE_S)  # the cameras go on; their detections wait in the spool
        outage_end_ms = time.time() * 1000
        broker.start()
        # The spool sends in order, so a frame captured 3 s after the outage arriving means the backlog came first.
        wait(lambda: all(any(m["capture_time_ms"] > outage_end_ms + 3000 for m in messages)
                         for messages in _detections(subscriber).values()), 120, "detections after the outage")
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()
        broker.stop()

    by_camera = _detections(subscriber)
    check_camera = subscriber_check()
    boots = set()
    for camera, messages in by_camera.items():
        for message in messages:
            validate_message("detections", message)
        assert check_camera(messages) == [], camera
        unique = list({m["message_id"]: m for m in messages}.values())  # QoS 1 may redeliver; the id says so
        assert [m["message_seq"] for m in unique] == list(range(1, len(unique) + 1)), camera
        frames = unique[-1]["seq"] - unique[0]["seq"] + 1
        assert sum(m["frames_skipped"] for m in unique[1:]) == frames - len(unique), camera
        captured = [m["capture_time_ms"] for m in unique]
        assert any(outage_start_ms + 1000 < t < outage_end_ms - 1000 for t in captured), \
            f"{camera}: no frame captured during the outage was delivered"
        boots |= {m["boot_id"] for m in unique}
    assert len(boots) == 1  # one process start, the same id for every camera
    # line2 publishes 1.5 of its 4 frames a second: the frames its mode left out are counted as skipped.
    line2 = by_camera["line2"]
    assert sum(m["frames_skipped"] for m in line2) >= len(line2)
    assert all(set(m["latency_ms"]) == {"queue", "inference", "total"} for m in line2)

    # model.hash is the SHA-256 of the detector file Triton loaded, computed here from the file on disk.
    [detector_file] = [p for p in (tmp_path / "state" / "repository").glob("*/1/model.*")
                       if p.suffix in (".onnx", ".plan")]
    expected = "sha256:" + hashlib.sha256(detector_file.read_bytes()).hexdigest()
    assert {m["model"]["hash"] for ms in by_camera.values() for m in ms} == {expected}

    [reply] = [r for r in subscriber.of_type("command_reply") if r["request_id"] == "q1"]
    assert reply["error"]["code"] == "unknown_command"
    known = reply["error"]["message"].split("known: ", 1)[1].split(", ")
    assert set(known) == documented_commands()

    rates = [float(m.group(1)) for f in notify.fields() if (m := re.search(r"([\d.]+) inferences/s", f))]
    assert rates and max(rates) > 0
