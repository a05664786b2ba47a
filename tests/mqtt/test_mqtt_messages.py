"""Typed messages: bad values fail at construction; payloads carry what subscribers need and match the schemas,
and the schemas reject what they should."""

from __future__ import annotations

import copy
import math
from datetime import datetime, timedelta, timezone
from typing import Any

import jsonschema
import pytest
from mqtt_helpers import MODEL, frame, validate
from support.detections import rows

from appliance.mqtt.messages import (
    CameraStatus,
    DetectionsMessage,
    ModelInfo,
    camera_status_payload,
    command_reply_payload,
    detections_payload,
    device_status_payload,
    encode,
    iso_utc_ms,
)
from appliance.mqtt.numbering import MessageCounter, MessageNumber
from appliance.mqtt.schema import MESSAGE_TYPES, load_schema

NUMBER = MessageNumber("0123456789abcdef0123456789abcdef", 5, 2)


def test_detections_payload_fields() -> None:
    msg = DetectionsMessage(camera_id="cam0", seq=42, capture_time=1714564800.1234, model=MODEL,
                            image_width=640, image_height=480,
                            detections=rows((16, "dog", 0.87, (-3.0, 48.0, 320.0, 500.0))),
                            latency_ms={"queue": 5.25, "inference": 20.25, "total": 25.5})
    p = detections_payload(msg, "dev1", "0" * 32, NUMBER)
    validate("detections", p)
    assert (p["seq"], p["boot_id"], p["message_seq"], p["frames_skipped"]) == (42, NUMBER.boot_id, 5, 2)
    assert p["capture_time"] == "2024-05-01T12:00:00.123Z" and p["capture_time_ms"] == 1714564800123
    assert p["model"] == {"name": "yolov3-tiny", "version": "1", "hash": MODEL.hash}
    assert p["image"] == {"width": 640, "height": 480}
    d = p["detections"][0]
    assert (d["class_id"], d["class_name"], d["score"]) == (16, "dog", 0.87)
    # Clamped to the image, and the normalized box agrees with the pixel box.
    assert d["box"] == {"x1": 0.0, "y1": 48.0, "x2": 320.0, "y2": 480.0}
    assert d["box_norm"] == {"x1": 0.0, "y1": 0.1, "x2": 0.5, "y2": 1.0}
    assert p["latency_ms"] == {"queue": 5.25, "inference": 20.25, "total": 25.5}


@pytest.mark.parametrize("ms", [0, 999, 1000, 1714564800123, 1714564800999, 253402300799999])
def test_iso_time_always_agrees_with_epoch_ms(ms: int) -> None:
    text = iso_utc_ms(ms)
    parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert (parsed - datetime(1970, 1, 1, tzinfo=timezone.utc)) == timedelta(milliseconds=ms)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"seq": -1}, "seq must be an int >= 0"),
    ({"seq": 1.5}, "seq must be an int >= 0"),
    ({"seq": True}, "seq must be an int >= 0"),
    ({"capture_time": math.nan}, "capture_time must be a finite number"),
    ({"image_width": 0}, "image_width must be an int > 0"),
    ({"image_height": 480.0}, "image_height must be an int > 0"),
    ({"latency_ms": {"queue": 0.0, "inference": -1.0, "total": 1.0}}, "latency_ms['inference'] must be >= 0"),
    ({"latency_ms": {"queue": 0.0, "inference": math.inf, "total": 1.0}}, "must be a finite number"),
    ({"latency_ms": {"infer": 1.0, "queue": 0.0, "inference": 1.0, "total": 1.0}},
     "latency_ms must have exactly the stages queue, inference, total"),
    ({"latency_ms": {"total": 1.0}}, "latency_ms must have exactly the stages"),
    ({"detections": ({"class_id": 1},)}, "detections must be Detections"),
])
def test_bad_detections_message_fails_at_construction(kwargs: dict[str, Any], fragment: str) -> None:
    base = dict(camera_id="cam0", seq=0, capture_time=1.0, model=MODEL, image_width=640, image_height=480,
                latency_ms={"queue": 0.0, "inference": 1.0, "total": 1.0})
    base.update(kwargs)
    with pytest.raises(ValueError) as info:
        DetectionsMessage(**base)
    assert fragment in str(info.value)


def test_model_and_camera_status_checks() -> None:
    with pytest.raises(ValueError, match="model name must not be empty"):
        ModelInfo("", "1", MODEL.hash)
    with pytest.raises(ValueError, match="model version must be a non-empty string"):
        ModelInfo("m", 3, MODEL.hash)  # type: ignore[arg-type]
    for bad in ("", "0123456789abcdef", "sha256:" + "AB" * 32, "sha256:" + "ab" * 31, "md5:" + "ab" * 32):
        with pytest.raises(ValueError, match="model hash must be 'sha256:' and 64 lowercase hex digits"):
            ModelInfo("m", "1", bad)
    with pytest.raises(ValueError, match="camera state must be one of"):
        CameraStatus("cam0", "running")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fps must be >= 0"):
        CameraStatus("cam0", "streaming", fps=-1)


def test_encode_refuses_nan() -> None:
    with pytest.raises(ValueError):
        encode({"x": math.nan})


def test_every_schema_is_valid_and_every_builder_matches_it() -> None:
    for name in MESSAGE_TYPES:
        jsonschema.Draft202012Validator.check_schema(load_schema(name))
    versions = {"appliance": "0.1.0", "schema": "1"}
    validate("device_status", device_status_payload("dev1", "online", 1.0, versions))
    validate("device_status", device_status_payload("dev1", "offline", None, versions, reason="connection lost"))
    validate("camera_status", camera_status_payload(CameraStatus("cam0", "stalled", 0.0, "no frame for 5 s"),
                                                    "dev1", 2.0))
    waiting = camera_status_payload(CameraStatus("usb", "waiting", 0.0, "/dev/video7 does not exist", since=1.25),
                                    "dev1", 9.0)
    validate("camera_status", waiting)
    assert (waiting["state"], waiting["since"], waiting["since_ms"]) == ("waiting", iso_utc_ms(1250), 1250)
    validate("command_reply", command_reply_payload("dev1", "x", "r", 3.0, result={"a": 1}))
    validate("command_reply", command_reply_payload("dev1", "x", None, 3.0, error=("bad_request", "why")))
    with pytest.raises(KeyError, match="no schema for message type 'nope'"):
        load_schema("nope")


@pytest.mark.parametrize("mutate, path", [
    (lambda p: p.pop("message_id"), "message_id"),
    (lambda p: p.update(seq=-1), "seq"),
    (lambda p: p.update(capture_time="2024-05-01 12:00:00"), "capture_time"),
    (lambda p: p["detections"][0].update(score=1.2), "score"),
    (lambda p: p["detections"][0]["box_norm"].update(x2=1.01), "x2"),
    (lambda p: p.update(extra=1), "extra"),
    (lambda p: p.update(schema_version=2), "schema_version"),
    # latency_ms names exactly the stages the frame path measures: a documented stage the code does not send fails
    (lambda p: p["latency_ms"].update(preprocess=1.0), "latency_ms"),
    (lambda p: p["latency_ms"].pop("queue"), "latency_ms"),
    (lambda p: p["model"].update(hash="0123456789abcdef"), "hash"),  # an engine key prefix is not a content hash
    (lambda p: p.pop("boot_id"), "boot_id"),
    (lambda p: p.update(boot_id="not-hex"), "boot_id"),
    (lambda p: p.update(message_seq=0), "message_seq"),
    (lambda p: p.pop("message_seq"), "message_seq"),
    (lambda p: p.update(frames_skipped=-1), "frames_skipped"),
    (lambda p: p.pop("frames_skipped"), "frames_skipped"),
])
def test_detections_schema_rejects_bad_payloads(mutate: Any, path: str) -> None:
    payload = detections_payload(frame("cam0", 1), "dev1", "f" * 32, NUMBER)
    validate("detections", payload)
    bad = copy.deepcopy(payload)
    mutate(bad)
    with pytest.raises(jsonschema.ValidationError):
        validate("detections", bad)


def test_reply_schema_rejects_ok_with_error() -> None:
    reply = command_reply_payload("dev1", "x", "r", 3.0, result={})
    reply["error"] = {"code": "failed", "message": "both"}
    with pytest.raises(jsonschema.ValidationError):
        validate("command_reply", reply)


def test_message_counter_numbers_each_camera_from_1_and_counts_the_frames_between() -> None:
    counter = MessageCounter("ab" * 16)
    got = [(cam, seq, counter.next(cam, seq)) for cam, seq in
           [("a", 10), ("a", 11), ("b", 3), ("a", 15), ("b", 4), ("a", 16), ("b", 10), ("a", 2)]]
    # Written out by hand: message_seq counts each camera's messages; frames_skipped the frame numbers between.
    assert [(cam, seq, n.message_seq, n.frames_skipped) for cam, seq, n in got] == [
        ("a", 10, 1, 0),   # the first of a boot: nothing before it to compare with
        ("a", 11, 2, 0),
        ("b", 3, 1, 0),
        ("a", 15, 3, 3),   # 12, 13, 14
        ("b", 4, 2, 0),
        ("a", 16, 4, 0),
        ("b", 10, 3, 5),   # 5..9
        ("a", 2, 5, 0),    # the camera's ring was made anew: its frame numbers start again
    ]
    assert {n.boot_id for _, _, n in got} == {"ab" * 16}
    assert len({MessageCounter().boot_id for _ in range(3)}) == 3  # a new boot_id per publisher (process start)
    with pytest.raises(ValueError, match="boot_id must be 32 lowercase hex digits"):
        MessageCounter("boot-1")
