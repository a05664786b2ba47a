"""The publisher's health message: its own MQTT and spool state beside the supervisor's camera and system readings,
published by the sender thread every ``health_interval_s`` (docs/mqtt.md, "Health")."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional

from appliance.mqtt.config import MqttConfig
from appliance.mqtt.messages import encode, health_payload
from appliance.mqtt.shared import Clock, PublisherStats, Shared, State
from appliance.mqtt.topics import Topics

log = logging.getLogger(__name__)

HealthProvider = Callable[[], Mapping[str, Any]]


class HealthReport:
    """``stats`` and ``config`` are read at each message (a reconnect replaces the config)."""

    def __init__(self, stats: Callable[[], PublisherStats], config: Callable[[], MqttConfig], shared: Shared,
                 topics: Topics, clock: Clock) -> None:
        self._stats, self._config, self._shared, self._topics, self._clock = stats, config, shared, topics, clock
        self.provider: Optional[HealthProvider] = None
        self.started_mono = 0.0

    def payload(self) -> dict[str, Any]:
        stats = self._stats()
        extra: Mapping[str, Any] = {}
        if self.provider is not None:
            try:
                extra = self.provider() or {}
            except Exception:  # a broken provider must not silence health
                log.exception("MQTT health provider failed; publishing health without camera/system readings")
        return health_payload(self._config().device_id, self._clock.time(),
                              self._clock.monotonic() - self.started_mono, stats, extra)

    def publish(self) -> None:
        """Sender thread (every health_interval_s) or the caller of publish_health_now; nothing while offline."""
        client = self._shared.client
        if client is None or self._shared.state is not State.CONNECTED:
            return
        try:
            payload = encode(self.payload())
        except (TypeError, ValueError) as exc:
            log.error("MQTT health payload is not JSON (%s); check the health provider's values", exc)
            return
        client.publish(self._topics.health, payload, qos=self._config().qos.health)
