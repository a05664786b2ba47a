"""The primary host application's ``STATE`` (Sparkplug 3.0): ``spBv1.0/STATE/<host id>``, retained JSON
``{"online": true|false, "timestamp": <ms>}`` that the host publishes as its birth and registers as its will. A
message counts only if its timestamp is not older than the last one that counted on the same broker, so a stale
retained message cannot undo a newer one."""

from __future__ import annotations

import json
import logging
from typing import Optional

log = logging.getLogger(__name__)

STATE_PREFIX = "spBv1.0/STATE/"


def parse_state(payload: bytes) -> tuple[bool, int]:
    """(online, timestamp ms) from a STATE payload; ValueError when it is not the spec's JSON."""
    doc = json.loads(payload.decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    online, timestamp = doc.get("online"), doc.get("timestamp")
    if not isinstance(online, bool):
        raise ValueError(f"'online' is {online!r}, not a boolean")
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise ValueError(f"'timestamp' is {timestamp!r}, not a number")
    return online, int(timestamp)


class PrimaryHost:
    """What the edge node knows of its primary host: the last STATE that counted, per broker."""

    def __init__(self, host_id: str) -> None:
        self.host_id = host_id
        self.topic = STATE_PREFIX + host_id
        self._last: dict[str, tuple[bool, int]] = {}

    def judge(self, broker: str, topic: str, payload: bytes) -> Optional[bool]:
        """The host's state on ``broker`` after this message: True online, False offline; None when the message
        does not count (another host's, malformed, or older than the last one that counted there)."""
        if topic != self.topic:
            return None
        try:
            online, timestamp = parse_state(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("sparkplug: ignoring a malformed STATE from %s on %s: %s", self.host_id, broker, exc)
            return None
        last = self._last.get(broker)
        if last is not None and timestamp < last[1]:
            log.info("sparkplug: ignoring a stale STATE from %s on %s (timestamp %d, before %d)", self.host_id,
                     broker, timestamp, last[1])
            return None
        self._last[broker] = (online, timestamp)
        return online
