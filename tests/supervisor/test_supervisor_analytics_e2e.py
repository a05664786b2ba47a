"""Analytics through the real appliance: `appliance run` as a process, the real detector (Triton, ONNX Runtime) on
OpenCV's vtest.avi (people walking), a real mosquitto that goes away for a while.

- every event validates against the `event` schema, and the detections carry `track_id`;
- a broker outage during events loses none: per camera the events arrive with seq 1..N, no gap, in order, and
  some were raised while the broker was down;
- each event's snapshot (GET /events/<event_id>.jpg on the health port) is of the event's own frame: its
  sidecar names that frame, its boxes are exactly the detections message of that frame's boxes (a snapshot drawn
  from another frame's detections fails this), the event's box is among them, and the decoded JPEG has the
  event colour on that box's edges;
- the retained counts agree with the events received;
- the zone's `dwell_s` raises `dwell` events: each one's track entered that zone earlier in the stream and had
  not left it, one per stay, and its `dwell_s` is at least the configured one.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.daemon import RunningDaemon
from support.engineseed import seed_state_dir
from support.httpclient import get
from support.mosquitto import Mosquitto
from support.ports import free_port
from support.schemas import validate_message
from support.subscriber import Subscriber

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
OUTAGE_S = 12.0
DWELL_S = 2.0  # vtest's walkers take longer than that to cross the lower half of the picture

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("detector_onnx"),  # fails, not skips, without the detector (tests/conftest.py)
]


def _config(tmp_path: Path, broker: Mosquitto, shm_root: Path, device: str, health_port: int) -> Path:
    path = tmp_path / "appliance.yaml"
    path.write_text(f"""
device: {{id: {device}}}
paths:
  state_dir: {tmp_path / 'state'}
  shm_root: {shm_root}
cameras:
  - id: hall
    source: {{type: file, path: {VTEST}, loop: true, realtime: true}}
    width: 768
    height: 576
    fps: 5
    analytics:
      classes: {{person: 0.3}}
      zones:
        - {{name: floor, units: normalized, points: [[0, 0.55], [1, 0.55], [1, 1], [0, 1]], dwell_s: {DWELL_S}}}
      lines:
        - {{name: right, a: [560, 220], b: [560, 420], in_side: right}}
      counts_interval_s: 5
      snapshots: {{max_width: 768, jpeg_quality: 90, keep: 500}}
mqtt:
  host: 127.0.0.1
  port: {broker.port}
  backoff: {{initial_s: 0.2, max_s: 1, jitter: 0}}
health:
  port: {health_port}
""")
    return path


def _rebinding_status(port: int, host: str) -> int:
    """The status of GET /api/overview on 127.0.0.1 with this ``Host`` header."""
    return get(f"http://127.0.0.1:{port}/api/overview", headers={"Host": host}, timeout=30).status


@dataclass
class Observed:
    """What one run of the appliance across a broker outage gave: the messages, and what its HTTP port served."""

    subscriber: Subscriber
    outage_start_ms: float
    outage_end_ms: float
    snapshots: dict[str, bytes]  # event_id -> the JPEG served for it
    latest: bytes
    metrics: str


def _run_across_an_outage(tmp_path: Path, shm_root: Path, engine_seed: Path) -> Observed:
    """Run the appliance until there are events from before, during and after a broker outage and a dwell event;
    read the snapshots, the latest picture and the metrics while it runs; stop it with SIGTERM."""
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    device = f"an{uuid.uuid4().hex[:6]}"
    port = free_port()
    config = _config(tmp_path, broker, shm_root, device, port)
    seed_state_dir(tmp_path / "state", engine_seed)
    subscriber = Subscriber(broker, f"appliance/{device}/#", persistent=True)
    daemon = RunningDaemon(tmp_path, config, REPO)
    wait, notify = daemon.wait, daemon.notify

    snapshots: dict[str, bytes] = {}
    try:
        assert notify.wait_for("READY=1", 240), daemon.tail()
        wait(lambda: len(subscriber.of_type("event")) >= 3, 180, "the first events")
        broker.stop()
        outage_start_ms = time.time() * 1000
        time.sleep(OUTAGE_S)  # the camera goes on; events and detections wait in the spool
        outage_end_ms = time.time() * 1000
        broker.start()
        wait(lambda: any(m["capture_time_ms"] > outage_end_ms + 3000 for m in subscriber.of_type("event")), 180,
             "events after the outage")
        wait(lambda: any(m["event"] == "dwell" for m in subscriber.of_type("event")), 120, "a dwell event")
        for event in subscriber.of_type("event"):  # while it runs: the health server serves the ring on disk
            if event["snapshot_id"] is not None:
                snapshots[event["event_id"]] = get(f"http://127.0.0.1:{port}/events/{event['event_id']}.jpg",
                                                   expect=200).body
        latest = get(f"http://127.0.0.1:{port}/cameras/hall/latest.jpg", expect=200).body
        metrics = get(f"http://127.0.0.1:{port}/metrics", expect=200).text
        assert _rebinding_status(port, "rebind.attacker.example") == 403  # the page on loopback: DNS rebinding
        assert _rebinding_status(port, f"rebind.attacker.example:{port}") == 403
        assert _rebinding_status(port, f"localhost:{port}") == 200
        assert daemon.terminate() == 0, daemon.tail()
    finally:
        daemon.close()
        subscriber.close()
        broker.stop()
    return Observed(subscriber, outage_start_ms, outage_end_ms, snapshots, latest, metrics)


def _check_events_and_dwells(events: list[dict], seen: Observed) -> None:
    """Every event valid, none lost across the outage, and each dwell one per stay of a track inside the floor."""
    for event in events:
        validate_message("event", event)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # none lost, in order
    assert len({e["boot_id"] for e in events}) == 1
    assert any(seen.outage_start_ms + 1000 < e["capture_time_ms"] < seen.outage_end_ms - 1000 for e in events), \
        "no event raised during the outage was delivered"
    types = Counter(e["event"] for e in events)
    assert types["enter"] > 0 and types["exit"] > 0 and types["dwell"] > 0, types
    inside: dict[int, dict] = {}  # track -> its floor enter, while it has not exited
    for event in events:  # in seq order (checked above)
        if event["event"] == "enter":
            inside[event["track_id"]] = event
        elif event["event"] == "exit":
            inside.pop(event["track_id"], None)
        elif event["event"] == "dwell":
            entered = inside.pop(event["track_id"], None)  # one dwell per stay
            assert entered is not None, \
                f"dwell {event['seq']}: track {event['track_id']} not inside (never entered, left, or dwelt already)"
            assert event["zone"] == entered["zone"] == "floor" and event["box"] is not None
            assert event["dwell_s"] >= DWELL_S
            stayed_s = (event["capture_time_ms"] - entered["capture_time_ms"]) / 1000
            assert abs(stayed_s - event["dwell_s"]) < 0.01, (stayed_s, event["dwell_s"])


def _check_snapshots(events: list[dict], detections: dict[int, dict], seen: Observed, snap_dir: Path) -> None:
    """The event's own frame, its boxes from that frame's detections message, the event's box drawn in red."""
    assert seen.snapshots, "no snapshot was served"
    checked = 0
    for event in events:
        if event["event_id"] not in seen.snapshots or event["box"] is None or event["frame_seq"] not in detections:
            continue
        sidecar = json.loads((snap_dir / f"{event['snapshot_id']}.json").read_text())
        assert sidecar["frame_seq"] == event["frame_seq"] and event["event_id"] in sidecar["event_ids"]
        frame = detections[event["frame_seq"]]
        expected = sorted((tuple(d["box"][k] for k in ("x1", "y1", "x2", "y2")), d["track_id"])
                          for d in frame["detections"])
        drawn = sorted((tuple(b["box"]), b["track_id"]) for b in sidecar["boxes"])
        assert drawn == expected, f"snapshot {event['snapshot_id']} boxes are not frame {event['frame_seq']}'s"
        box = tuple(event["box"][k] for k in ("x1", "y1", "x2", "y2"))
        assert (box, event["track_id"]) in drawn
        image = cv2.imdecode(np.frombuffer(seen.snapshots[event["event_id"]], np.uint8), cv2.IMREAD_COLOR)
        assert image.shape[:2] == (576, 768)
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        edge = np.concatenate([image[y1, x1:x2 + 1], image[y2, x1:x2 + 1],
                               image[y1:y2 + 1, x1], image[y1:y2 + 1, x2]]).astype(int)
        red = (edge[:, 2] > 150) & (edge[:, 1] < 110) & (edge[:, 0] < 110)  # EVENT_BGR (0, 0, 255), JPEG-blurred
        assert red.mean() > 0.6, f"event {event['seq']}: the box is not drawn on its snapshot ({red.mean():.2f})"
        checked += 1
    assert checked >= 3, checked
    assert cv2.imdecode(np.frombuffer(seen.latest, np.uint8), cv2.IMREAD_COLOR) is not None
    retained = [m.payload for m in seen.subscriber.binary("/hall/snapshot")]
    assert retained and retained[-1][:2] == b"\xff\xd8"  # JPEG bytes


def _check_counts(events: list[dict], seen: Observed) -> None:
    """The counts: schema, and the latest agrees with the events it says it includes."""
    counts = seen.subscriber.of_type("counts")
    for message in counts:
        validate_message("counts", message)
    last = max(counts, key=lambda m: (m["last_event_seq"], m["time_ms"]))
    upto = [e for e in events if e["seq"] <= last["last_event_seq"]]
    floor = last["zones"]["floor"]
    assert floor["entered"] == sum(e["event"] == "enter" for e in upto)
    assert floor["exited"] == sum(e["event"] == "exit" for e in upto)
    assert last["lines"]["right"] == {d: sum(e["event"] == "cross" and e["direction"] == d for e in upto)
                                      for d in ("in", "out")}
    assert 'appliance_analytics_events_total{camera="hall",type="enter"}' in seen.metrics
    assert 'appliance_zone_entered_total{camera="hall",zone="floor"}' in seen.metrics


def test_events_snapshots_and_counts_through_the_real_appliance_across_a_broker_outage(
        tmp_path: Path, shm_root: Path, engine_seed: Path) -> None:
    assert VTEST.is_file(), f"{VTEST} missing: scripts/setup.d/40-vtest.sh fetches it"
    seen = _run_across_an_outage(tmp_path, shm_root, engine_seed)
    events = list({e["event_id"]: e for e in seen.subscriber.of_type("event")}.values())  # QoS 1 may redeliver
    _check_events_and_dwells(events, seen)

    detections = {m["seq"]: m for m in seen.subscriber.of_type("detections")}
    for message in detections.values():
        validate_message("detections", message)
    tracked = [d["track_id"] for m in detections.values() for d in m["detections"] if d["track_id"] is not None]
    assert tracked, "no detection carried a track_id"
    _check_snapshots(events, detections, seen, tmp_path / "state" / "snapshots" / "hall")
    _check_counts(events, seen)
