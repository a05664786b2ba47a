"""Topic names, in one place: every topic the appliance publishes or subscribes to is built here.

The layout, with each topic's payload, QoS and retention: docs/mqtt.md, "Topics"."""

from __future__ import annotations

import re

from appliance.config.ids import ID_PATTERN, id_problem
from appliance.mqtt.errors import MqttConfigError

_ID = re.compile(ID_PATTERN)
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
# Camera ids share a topic level with these device-level topics.
RESERVED_CAMERA_IDS = frozenset({"status", "health", "command", "reply", "ota", "engines"})


def check_id(kind: str, value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise MqttConfigError(f"{kind} {problem} (it is an MQTT topic level)")
    return value


def check_camera_id(camera_id: str) -> str:
    check_id("camera id", camera_id)
    if camera_id in RESERVED_CAMERA_IDS:
        raise MqttConfigError(
            f"camera id {camera_id!r} is reserved (it would collide with a device topic); "
            f"avoid {sorted(RESERVED_CAMERA_IDS)}")
    return camera_id


def group_desired(prefix: str, group: str) -> str:
    """The retained desired-state topic of a fleet group (``appliance.ota.desired``)."""
    return f"{prefix}/groups/{check_id('group', group)}/ota/desired"


class Topics:
    """Builds every topic from the prefix and device id, checking ids so no wildcard or '/' slips in."""

    def __init__(self, prefix: str, device_id: str) -> None:
        if not _PREFIX.match(prefix):
            raise MqttConfigError(f"topic prefix {prefix!r} must be levels of letters, digits, '_', '.', '-' "
                                  "separated by single '/'")
        self.prefix = prefix
        self.device_id = check_id("device id", device_id)
        self.base = f"{prefix}/{device_id}"

    @property
    def device_status(self) -> str:
        return f"{self.base}/status"

    @property
    def health(self) -> str:
        return f"{self.base}/health"

    @property
    def reply(self) -> str:
        return f"{self.base}/reply"

    @property
    def command_filter(self) -> str:
        return f"{self.base}/command/+"

    def command(self, name: str) -> str:
        return f"{self.base}/command/{check_id('command name', name)}"

    def command_name(self, topic: str) -> str | None:
        """The command name if ``topic`` is one of our command topics, else None."""
        head = f"{self.base}/command/"
        if not topic.startswith(head):
            return None
        name = topic[len(head):]
        return name if _ID.match(name) else None

    def device_topic(self, suffix: str) -> str:
        """``<base>/<suffix>``: a device-level topic such as ``ota/status``; every level is checked."""
        for level in suffix.split("/"):
            check_id("topic level", level)
        return f"{self.base}/{suffix}"

    def camera_status(self, camera_id: str) -> str:
        return f"{self.base}/{check_camera_id(camera_id)}/status"

    def detections(self, camera_id: str) -> str:
        return f"{self.base}/{check_camera_id(camera_id)}/detections"

    def camera_topic(self, camera_id: str, leaf: str) -> str:
        """``<base>/<camera>/<leaf>`` for a camera's ``events``, ``counts``, ``snapshot`` or ``clips``."""
        return f"{self.base}/{check_camera_id(camera_id)}/{check_id('topic level', leaf)}"
