"""The failover rule of ``mqtt.hosts`` for every connection that follows it (the JSON session, the Sparkplug node).

After each attempt or session ends, the connection moves to the next broker of the list (wrapping round); the
backoff delay comes only after a full round of failures, as many in a row as there are brokers. A session that held
resets both the round and the backoff. With one broker this is plain reconnect-with-backoff.
"""

from __future__ import annotations

from collections.abc import Sequence

from appliance.backoff import Backoff
from appliance.mqtt.config import Broker


class BrokerRotation:
    """``current``: the broker of the current or next attempt (network thread only)."""

    def __init__(self, brokers: Sequence[Broker], backoff: Backoff) -> None:
        self.brokers = tuple(brokers)
        self.backoff = backoff
        self._index = 0
        self._failed_in_round = 0

    @property
    def current(self) -> Broker:
        return self.brokers[self._index]

    def ended(self, held: bool) -> tuple[Broker, float]:
        """The attempt on ``current`` ended (``held``: a session that lasted); move on, and return the broker to
        try next and how long to wait first (0.0 within a round)."""
        if held:
            self.backoff.reset()
            self._failed_in_round = 0
        self._index = (self._index + 1) % len(self.brokers)
        self._failed_in_round += 1
        if self._failed_in_round < len(self.brokers):
            return self.current, 0.0
        self._failed_in_round = 0
        return self.current, self.backoff.next_delay()
