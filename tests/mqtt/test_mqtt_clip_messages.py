"""An event's clip field and the clip message, as the publisher encodes them, hold to their schemas."""

from __future__ import annotations

import jsonschema
import pytest
from mqtt_helpers import validate

from appliance.events import ClipPlan, Event
from appliance.mqtt.messages import ClipMessage, clip_payload, event_payload

EVENT_ID = "ab" * 16


def _event(clip: ClipPlan | None) -> Event:
    return Event(event_id=EVENT_ID, camera_id="hall", seq=3, event="enter", track_id=4, class_id=0,
                 class_name="person", score=0.9, capture_time=1714564800.123, frame_seq=10, image_width=640,
                 image_height=480, zone="floor", box=(1.0, 2.0, 30.0, 40.0), clip=clip)


def test_an_event_of_a_recording_camera_carries_its_planned_clip() -> None:
    payload = event_payload(_event(ClipPlan(f"/events/{EVENT_ID}.mp4", 1714564795.123, 1714564805.123)), "d", "c" * 32)
    validate("event", payload)
    assert payload["clip"] == {"url": f"/events/{EVENT_ID}.mp4", "start": "2024-05-01T11:59:55.123Z",
                               "start_ms": 1714564795123, "end": "2024-05-01T12:00:05.123Z", "end_ms": 1714564805123}
    without = event_payload(_event(None), "d", "c" * 32)
    validate("event", without)
    assert "clip" not in without


def test_clip_messages_complete_and_failed_validate_and_a_bad_url_does_not() -> None:
    done = clip_payload(ClipMessage(EVENT_ID, "hall", f"/events/{EVENT_ID}.mp4", "complete", 1.5, 12.0, 157),
                        "d", "c" * 32)
    validate("clip", done)
    assert done["reason"] is None and done["start_ms"] == 1500
    failed = clip_payload(ClipMessage(EVENT_ID, "hall", f"/events/{EVENT_ID}.mp4", "failed", 1.5, 12.0,
                                      reason="no footage"), "d", "c" * 32)
    validate("clip", failed)
    with pytest.raises(jsonschema.ValidationError):
        validate("clip", {**done, "url": "/events/x.mp4"})
