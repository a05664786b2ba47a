"""Access to the JSON Schema files shipped in appliance/mqtt/schemas/ (one per message type)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

MESSAGE_TYPES = ("detections", "device_status", "camera_status", "health", "command", "command_reply",
                 "ota_status", "ota_desired", "engine_status", "event", "counts", "reload_status", "clip", "gap")


def load_schema(message_type: str) -> dict[str, Any]:
    if message_type not in MESSAGE_TYPES:
        raise KeyError(f"no schema for message type {message_type!r}; known: {', '.join(MESSAGE_TYPES)}")
    text = (resources.files("appliance.mqtt") / "schemas" / f"{message_type}.schema.json").read_text("utf-8")
    return json.loads(text)
