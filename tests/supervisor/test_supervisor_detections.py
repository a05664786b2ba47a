"""A frame's detections from the ensemble's outputs to the payload, as one Detections: the payload's bytes (score
clamping, class_N names, rounding, key order) and track ids given back by row."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from appliance.analytics.config import AnalyticsConfig, TrackerConfig
from appliance.detections import NO_TRACK
from appliance.events import Event
from appliance.mqtt.messages import ModelInfo, detections_payload, encode
from appliance.mqtt.numbering import MessageNumber
from appliance.pipeline.eventstage import CameraAnalytics, StageParts
from appliance.pipeline.results import build_message
from appliance.pipeline.sink import Sinks
from appliance.pipeline.sinks import MqttSink

NAMES = ("person", "bicycle", "car", *(f"n{i}" for i in range(3, 16)), "dog", *(f"n{i}" for i in range(17, 80)))
MODEL = ModelInfo("yolov3-tiny", "1", "sha256:" + "ab" * 32)
LATENCY = {"queue": 5.25, "inference": 20.123456, "total": 25.5}


def meta(seq: int = 42) -> SimpleNamespace:
    return SimpleNamespace(camera_id="cam0", seq=seq, t_utc=1714564800.1234, width=640, height=480,
                           pixel_format="bgr")


def outputs(boxes: Sequence[Sequence[float]], scores: Sequence[float], classes: Sequence[int]) -> dict[str, Any]:
    return {"BOXES": np.array(boxes, dtype=np.float32).reshape(-1, 4), "SCORES": np.array(scores, dtype=np.float32),
            "CLASSES": np.array(classes, dtype=np.int32)}


# What the appliance published for these outputs when each frame's detections were Python objects.
PAYLOAD = (
    '{"schema_version":1,"type":"detections","message_id":"00000000000000000000000000000000","device_id":"dev1",'
    '"camera_id":"cam0","seq":42,"boot_id":"0123456789abcdef0123456789abcdef","message_seq":5,"frames_skipped":2,'
    '"capture_time":"2024-05-01T12:00:00.123Z","capture_time_ms":1714564800123,"model":{"name":"yolov3-tiny",'
    '"version":"1","hash":"sha256:abababababababababababababababababababababababababababababababab"},'
    '"image":{"width":640,"height":480},"latency_ms":{"queue":5.25,"inference":20.123,"total":25.5},"detections":['
    '{"class_id":16,"class_name":"dog","score":0.87,"box":{"x1":0.0,"y1":48.12,"x2":320.33,"y2":480.0},'
    '"box_norm":{"x1":0.0,"y1":0.10026,"x2":0.500521,"y2":1.0},"track_id":3},'
    '{"class_id":0,"class_name":"person","score":1.0,"box":{"x1":10.0,"y1":20.0,"x2":10.0,"y2":20.0},'
    '"box_norm":{"x1":0.015625,"y1":0.041667,"x2":0.015625,"y2":0.041667},"track_id":null},'
    '{"class_id":2,"class_name":"car","score":0.0,"box":{"x1":100.01,"y1":0.5,"x2":639.99,"y2":479.99},'
    '"box_norm":{"x1":0.156266,"y1":0.001042,"x2":0.999992,"y2":0.999987},"track_id":7},'
    '{"class_id":80,"class_name":"class_80","score":0.123457,"box":{"x1":1.0,"y1":2.0,"x2":3.0,"y2":4.0},'
    '"box_norm":{"x1":0.001563,"y1":0.004167,"x2":0.004687,"y2":0.008333},"track_id":null}]}')


def test_the_payload_of_an_ensemble_result_byte_for_byte() -> None:
    out = outputs([[-3.25, 48.125, 320.3333, 500.0], [10.0, 20.0, 10.0, 20.0], [100.01, 0.5, 639.995, 479.994],
                   [1.0, 2.0, 3.0, 4.0]], [0.87, 1.25, np.nan, 0.123456789], [16, 0, 2, 80])
    message = build_message(meta(), out, MODEL, NAMES, LATENCY)
    assert message.detections.scores[1:3].tolist() == [1.0, 0.0]  # clamped, NaN as 0
    assert message.detections.track_ids.tolist() == [NO_TRACK] * 4
    tracked = message.detections.with_track_ids(np.array([3, NO_TRACK, 7, NO_TRACK]))
    message = type(message)(**{**message.__dict__, "detections": tracked})
    number = MessageNumber("0123456789abcdef0123456789abcdef", 5, 2)
    assert encode(detections_payload(message, "dev1", "0" * 32, number)) == PAYLOAD.encode()


class Publisher:
    def publish_events(self, events: Sequence[Event]) -> int:
        return len(events)

    def publish_counts(self, camera_id: str, last_event_seq: int, active_tracks: int, counts: Any) -> None:
        pass


class Metrics:
    def record_analytics_step(self, camera_id: str, seconds: float, event_types: Sequence[str]) -> None:
        pass


def test_track_ids_go_to_their_rows_even_where_boxes_are_identical() -> None:
    # Row 0 is below the tracker's low_score, rows 1 and 2 the same box confidently, row 3 a class the
    # analytics leave out: a join on class and box would have given row 0 a track id.
    config = AnalyticsConfig(classes={"person": 0.3}, tracker=TrackerConfig(birth_frames=2))
    camera = SimpleNamespace(id="cam0", frame_size=(640, 480), analytics=config)
    stage = CameraAnalytics(camera, NAMES, StageParts(Sinks([MqttSink(Publisher())]), Metrics()))
    box = [100.0, 100.0, 140.0, 200.0]
    for seq in range(3):
        message = build_message(meta(seq), outputs([box, box, box, box], [0.05, 0.9, 0.9, 0.9], [0, 0, 0, 2]), MODEL,
                                NAMES, LATENCY)
        message = stage.step(meta(seq), message, None)
    track_ids = message.detections.track_ids.tolist()
    assert track_ids[0] == NO_TRACK and track_ids[3] == NO_TRACK and sorted(track_ids[1:3]) == [1, 2]
    assert [d.track_id for d in message.detections] == [None, *track_ids[1:3], None]
