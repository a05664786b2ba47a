"""A line's reset and the counts it resets reach the sinks (MQTT, and the OPC UA feed as the mirror) in one order.
The camera's analytics stage is driven directly: one thread plays the completion thread (a person walking back
and forth across the line, a step and a publish per frame), another resets the line as an OPC UA operator would,
and the sinks yield the CPU inside each hand-over so the two threads interleave at every point. Over the sequence
of counts each sink got, the last event's seq never goes back and a count never rises without a new event."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from appliance.analytics.config import AnalyticsConfig, LineConfig
from appliance.events import Event
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.messages import ModelInfo
from appliance.pipeline.eventstage import CameraAnalytics, StageParts
from appliance.pipeline.results import build_message
from appliance.pipeline.sink import Sinks
from appliance.pipeline.sinks import MqttSink, OpcUaSink

W, H = 320, 240
MODEL = ModelInfo("yolov3-tiny", "base", "sha256:" + "5e" * 32)


class Sink:
    """Records the counts it is handed, in the order it got them; yields inside each hand-over."""

    def __init__(self) -> None:
        self.counts: list[tuple[int, int]] = []  # (last_event_seq, in + out of the line)
        self.events = 0

    def publish_events(self, events: Sequence[Event]) -> int:
        self.events += len(events)
        return len(events)

    def publish_counts(self, camera_id: str, last_event_seq: int, active_tracks: int,
                       counts: Mapping[str, Any]) -> None:
        time.sleep(0.0002)  # let the other thread run between reading the counts and handing them over
        self.counts.append((last_event_seq, sum(counts["lines"]["door"].values())))


def _message(seq: int, x: float) -> tuple[Any, Any]:
    meta = SimpleNamespace(camera_id="cam", seq=seq, t_utc=1000.0 + seq / 10, width=W, height=H)
    outputs = {"BOXES": np.array([[x - 15, 100, x + 15, 200]], np.float32),
               "SCORES": np.array([0.9], np.float32), "CLASSES": np.array([0], np.int32)}
    return meta, build_message(meta, outputs, MODEL, ["person"], {"queue": 1.0, "inference": 1.0, "total": 2.0})


def _check_order(counts: list[tuple[int, int]]) -> None:
    for (seq_before, total_before), (seq, total) in zip(counts, counts[1:]):
        assert seq >= seq_before, f"counts of event {seq} handed over after those of event {seq_before}"
        assert total <= total_before or seq > seq_before, (
            f"the line went from {total_before} to {total} with no new event (seq {seq}): counts read before a "
            "reset were handed over after it")


def test_counts_read_before_a_reset_are_never_handed_over_after_it() -> None:
    config = AnalyticsConfig(classes={"person": 0.3}, tracker={"birth_frames": 2},
                             lines=[LineConfig(name="door", a=(160, 0), b=(160, 240), in_side="right")])
    mqtt, opcua = Sink(), Sink()
    camera = SimpleNamespace(id="cam", frame_size=(W, H), analytics=config)
    sinks = Sinks([MqttSink(mqtt), OpcUaSink(opcua)])  # the wire, then the OPC UA server, as the appliance lists them
    stage = CameraAnalytics(camera, ["person"], StageParts(sinks, ApplianceMetrics()))
    path = [float(x) for x in (*range(100, 230, 20), *range(220, 90, -20))]  # back and forth across x = 160
    done, resets = threading.Event(), [0]

    def operator() -> None:
        while not done.is_set():
            assert stage.reset_line("door")
            resets[0] += 1
            time.sleep(0.0005)

    resetter = threading.Thread(target=operator)
    resetter.start()
    try:
        for seq in range(1500):
            meta, message = _message(seq, path[seq % len(path)])
            stage.step(meta, message, None)
            time.sleep(0.0002)  # the frame's detections are spooled here, between the step and its publish
            stage.publish_pending()
    finally:
        done.set()
        resetter.join(10)
    assert mqtt.events > 100 and resets[0] > 100, (mqtt.events, resets[0])  # both sides really interleaved
    for sink in (mqtt, opcua):
        _check_order(sink.counts)
