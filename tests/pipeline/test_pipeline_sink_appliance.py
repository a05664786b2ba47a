"""A sink added in one class and one registration gets every result of a real appliance run: the appliance in this
process (its own Triton, the real detector, a capture process on OpenCV's vtest.avi, a real broker), a sink
handed to ``Appliance(sinks=...)``, and what it received held against what an MQTT subscriber received from the
same run: every detections message and every event, with the same content, and the frames it asked for (every
third of the camera's, an owned copy) in their frame's order."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.engineseed import seed_state_dir
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber
from support.wait import wait_until

from appliance.appconfig.app import AppConfig
from appliance.config.validate import load_config
from appliance.events import Event
from appliance.mqtt.messages import DetectionsMessage
from appliance.pipeline.sink import Counts, Frame, Sink
from appliance.supervisor.app import Appliance

REPO = Path(__file__).resolve().parents[2]
VTEST = REPO / ".models" / "vtest" / "vtest.avi"
W, H = 768, 576

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("detector_onnx"),  # fails, not skips, without the detector (tests/conftest.py)
]


class Recorder(Sink):
    """The sink under test: keeps what it is handed, asks for every third frame."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.detections: list[DetectionsMessage] = []
        self.events: list[Event] = []
        self.counts: list[Counts] = []
        self.frames: list[tuple[int, tuple[int, ...], bool, bool]] = []  # seq, shape, owned, before its detections
        self.asked = 0
        self.stopped = False

    def on_detections(self, message: DetectionsMessage) -> None:
        with self.lock:
            self.detections.append(message)

    def on_events(self, events: Sequence[Event]) -> None:
        with self.lock:
            self.events.extend(events)

    def on_counts(self, counts: Counts) -> None:
        with self.lock:
            self.counts.append(counts)

    def wants_frame(self, camera_id: str) -> bool:
        self.asked += 1
        return self.asked % 3 == 0

    def on_frame(self, camera_id: str, frame: Frame) -> None:
        with self.lock:
            seen = {m.seq for m in self.detections}
            self.frames.append((frame.message.seq, frame.pixels.shape, bool(frame.pixels.flags.owndata),
                                frame.message.seq not in seen))

    def stop(self) -> None:
        self.stopped = True


def _config(tmp_path: Path, broker: Mosquitto, shm_root: Path) -> Path:
    path = tmp_path / "appliance.yaml"
    path.write_text(f"""
device: {{id: sinktest}}
paths:
  state_dir: {tmp_path / 'state'}
  shm_root: {shm_root}
cameras:
  - id: hall
    source: {{type: file, path: {VTEST}, loop: true, realtime: true}}
    width: {W}
    height: {H}
    fps: 5
    analytics:
      classes: {{person: 0.3}}
      zones:
        - {{name: floor, units: normalized, points: [[0, 0.55], [1, 0.55], [1, 1], [0, 1]]}}
      lines:
        - {{name: right, a: [560, 220], b: [560, 420], in_side: right}}
mqtt:
  host: 127.0.0.1
  port: {broker.port}
health:
  enabled: false
""")
    return path


def _run(tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path,
         sink: Recorder, subscriber: Subscriber) -> tuple[set[int], set[str]]:
    """The appliance runs until the sink has 4 events and MQTT every detections message and event the sink had by
    then (their frames and event ids are returned); then it stops."""
    seed_state_dir(tmp_path / "state", engine_seed)
    app = Appliance(load_config(_config(tmp_path, broker, shm_root), AppConfig), sinks=[sink])
    try:
        app.start()
        wait_until(lambda: len(sink.events) >= 4, 240, 0.2, "4 events at the sink")
        with sink.lock:
            seqs, events = {m.seq for m in sink.detections}, {e.event_id for e in sink.events}
        wait_until(lambda: seqs <= {d["seq"] for d in subscriber.of_type("detections")}
                   and events <= {e["event_id"] for e in subscriber.of_type("event")}, 60, 0.2,
                   "MQTT to get every detections message and event the sink had")
    finally:
        app.stop()
    return seqs, events


def test_a_registered_sink_gets_every_result_and_event_that_mqtt_gets(
        tmp_path: Path, broker: Mosquitto, shm_root: Path, engine_seed: Path) -> None:
    sink = Recorder()
    with Subscriber(broker, "appliance/sinktest/#") as subscriber:
        cut, cut_events = _run(tmp_path, broker, shm_root, engine_seed, sink, subscriber)
        on_wire = {d["seq"]: d for d in subscriber.of_type("detections")}  # QoS 1 may deliver one twice
        events_on_wire = {e["event_id"]: e for e in subscriber.of_type("event")}
    assert sink.stopped

    # Every result MQTT got, the sink got, with the same content; the sink's results up to the cut were all on the
    # wire (those after it until the stop may still wait in the spool).
    mine = {m.seq: m for m in sink.detections}
    assert len(mine) == len(sink.detections) >= len(cut) > 10
    assert cut <= set(on_wire) <= set(mine)
    for seq, payload in on_wire.items():
        message = mine[seq]
        assert payload["camera_id"] == message.camera_id == "hall"
        assert payload["image"] == {"width": message.image_width, "height": message.image_height}
        rows = list(message.detections)
        assert [d["track_id"] for d in payload["detections"]] == [r.track_id for r in rows]
        assert [d["class_name"] for d in payload["detections"]] == [r.class_name for r in rows]
        assert [d["score"] for d in payload["detections"]] == [round(r.score, 6) for r in rows]
    assert any(r.track_id is not None for m in sink.detections for r in m.detections)

    # Every event, by id, with the same facts, each of a frame whose detections the sink had; seq 1..N.
    assert cut_events <= set(events_on_wire) <= {e.event_id for e in sink.events}
    assert len(cut_events) >= 4
    for event in sink.events:
        assert event.frame_seq in mine
        wire = events_on_wire.get(event.event_id)
        if wire is not None:
            assert (wire["seq"], wire["event"], wire["track_id"], wire["frame_seq"], wire.get("zone"),
                    wire.get("line")) == (event.seq, event.event, event.track_id, event.frame_seq, event.zone,
                                          event.line)
    assert [e.seq for e in sink.events] == list(range(1, len(sink.events) + 1))
    assert sink.counts and all(c.camera_id == "hall" for c in sink.counts)

    # The frame tap: every third frame asked for, each an H x W x 3 copy that owns its pixels (the ring's slot
    # went back once Triton read it), handed over before its frame's detections.
    assert sink.frames and all(shape == (H, W, 3) and owned and before for _, shape, owned, before in sink.frames)
    assert {seq for seq, _, _, _ in sink.frames} <= set(mine)
    assert len(sink.frames) == pytest.approx(len(mine) / 3, abs=2)
