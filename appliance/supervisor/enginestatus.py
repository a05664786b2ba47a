"""Engine build progress to MQTT while the supervisor builds at start: the retained
``<prefix>/<device>/engines/status`` (docs/mqtt.md). A TensorRT build reports many times a second and a
heartbeat every 30 s; a subscriber needs every phase and a pulse, not every tick."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from appliance.detector.engines.progress import FINAL_PHASES, ProgressEvent
from appliance.mqtt.messages import engine_status_payload

TOPIC = "engines/status"

Publish = Callable[[str, Mapping[str, Any]], None]  # (device topic suffix, payload), published retained


class EngineStatusForwarder:
    """Publishes each new phase and each final event at once; within a phase, at most one update per
    ``min_interval_s``."""

    def __init__(self, publish: Publish, device_id: str, *, min_interval_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._publish, self._device_id = publish, device_id
        self._min_interval_s = min_interval_s
        self._clock, self._wall = clock, wall
        self._last: tuple[str, str, float] | None = None  # model, phase, when published

    def __call__(self, event: ProgressEvent) -> None:
        now = self._clock()
        last = self._last
        if (last is not None and last[:2] == (event.model, event.phase) and event.phase not in FINAL_PHASES
                and now - last[2] < self._min_interval_s):
            return
        self._last = (event.model, event.phase, now)
        self._publish(TOPIC, engine_status_payload(self._device_id, event.to_dict(), self._wall()))
