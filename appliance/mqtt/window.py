"""The QoS 1 in-flight window: which spooled detections paho has sent and the broker has not yet acknowledged.

Between sessions it takes the window back from paho's resend queue when a detection seems to kill sessions
(``after_session``), so one message a broker will not take cannot block the queue; either way it never reorders a
camera's detections (docs/mqtt.md, "Delivery guarantees")."""

from __future__ import annotations

import collections
import logging
import threading
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import paho.mqtt.client as paho

    from appliance.mqtt.shared import Shared
    from appliance.mqtt.spool import Spool

log = logging.getLogger(__name__)

_POISON_STRIKES = 5    # probe sessions in a row that die with the same detection alone in flight


class InflightWindow:
    """Threading contract.

    - network thread: ``on_puback`` (paho's on_publish), ``resize``, ``expect_status``/``status_sent`` (at CONNACK)
      and ``after_session`` (between sessions, holding ``shared.gate``, so the sender cannot publish meanwhile).
    - sender thread: ``record_sent`` (holding ``shared.lock``, inside ``shared.gate``), ``drain_acks``, ``limit``,
      ``cursor``; and the stopping thread's final ``drain_acks`` once the sender has been joined.
    - ``shared.lock`` guards ``inflight`` and ``probe_row``; ``acks`` is a deque (append and popleft are atomic);
      ``cursor`` and ``probing`` are written by the sender and, under ``shared.gate``, by the network thread;
      ``strikes`` is the network thread's alone.
    """

    def __init__(self, size: int, shared: Shared, spool: Spool, topic_base: str) -> None:
        self._shared = shared
        self._lock = shared.lock
        self._spool = spool
        self._topic_base = topic_base
        self.size = size                       # this session's window (resize() at each CONNACK)
        self.acks: collections.deque[tuple[int, Any]] = collections.deque()  # (mid, reason) from on_publish
        self.inflight: dict[int, int] = {}     # paho mid -> spool id
        self.cursor = 0                        # highest spool id handed to paho
        # Probing (see after_session): after a session dies young with detections in flight, they are
        # resent one at a time, each only after this session's own status publish was acknowledged.
        self.probing = False
        self.probe_row: Optional[int] = None   # spool id sent alone in this probe session (sender sets it)
        self._strikes: tuple[Optional[int], int] = (None, 0)  # (spool id, probe sessions it died alone in)
        self._status_mid: Optional[int] = None
        self._status_acked = threading.Event()

    # -- sender thread -------------------------------------------------------------------------------------

    def limit(self) -> int:
        """How many detections may be unacknowledged now: while probing (see after_session), one, and only
        once this session's status publish was acknowledged."""
        if self.probing:
            return 1 if self._status_acked.is_set() else 0
        return self.size

    def record_sent(self, mid: int, row_id: int) -> None:
        """A QoS 1/2 detection handed to paho. The caller holds ``shared.lock``."""
        self.inflight[mid] = row_id
        if self.probing:
            self.probe_row = row_id

    def pending(self) -> int:
        with self._lock:
            return len(self.inflight)

    def drain_acks(self) -> tuple[list[int], int]:
        """The spool ids the broker answered since the last call, and how many of those answers were failures
        (an MQTT 5 PUBACK with a failure reason: the message is done, a retry would fail the same way)."""
        done: list[int] = []
        rejected = 0
        while True:
            try:
                mid, reason = self.acks.popleft()
            except IndexError:
                break
            with self._lock:
                row_id = self.inflight.pop(mid, None)
            if row_id is None:
                continue  # status, health or reply
            if self.probing and row_id == self.probe_row:
                self.probing = False  # the broker answered: the session is healthy again
            if getattr(reason, "is_failure", False):
                rejected += 1
                log.error("MQTT broker rejected a detections message (spool id %d): %s; check the broker ACL "
                          "for %s/#", row_id, reason, self._topic_base)
            done.append(row_id)
        return done, rejected

    def take_all_back(self) -> None:
        """Between a stopped session and a new client (``MqttPublisher.reconnect``, both threads joined): every
        detection sent and not acknowledged goes back to the spool, and the sender sends it again in spool order
        ahead of the newer ones (at least once). The new client has no queue of the old one's to resend."""
        with self._shared.gate:
            with self._lock:
                inflight = dict(self.inflight)
                self.inflight.clear()
                self.probe_row = None
            self.probing, self._strikes = False, (None, 0)
            if inflight:
                self.cursor = min(inflight.values()) - 1

    # -- network thread ------------------------------------------------------------------------------------

    def on_puback(self, mid: int, reason: Any) -> None:
        if mid == self._status_mid:
            self._status_acked.set()
        self.acks.append((mid, reason))

    def resize(self, configured: int, receive_max: Optional[int]) -> int:
        """Set this session's window from the configured one and the broker's Receive Maximum; returns it."""
        window = configured
        if receive_max:
            # MQTT 5: exceeding the broker's Receive Maximum is a protocol error; keep room for status/replies.
            window = max(1, min(window, receive_max - min(4, receive_max // 4)))
        self.size = window
        return window

    def expect_status(self) -> None:
        """Called just before this session's 'online' status is published (see limit)."""
        self._status_acked.clear()

    def status_sent(self, mid: int, qos: int) -> None:
        self._status_mid = mid
        if qos == 0:
            self._status_acked.set()

    def after_session(self, client: paho.Client, short: bool, reason: str, new_broker: bool = False) -> None:
        """Between sessions (network thread): take the window back when the next session is with another broker
        (``new_broker``), and find a detection that kills sessions and set it aside.

        Another broker (mqtt.hosts) has no session state of ours: paho would resend its queue there, but the
        spool is what we answer for, so the unacknowledged detections go back to it and the sender sends them
        again, in spool order, ahead of the newer ones. A detection the old broker acknowledged but whose PUBACK
        was lost with the connection (or not yet drained) is sent again too: at least once.

        Some brokers close the connection instead of (or right after) refusing a publish: mosquitto 2.0 does so
        for an MQTT 5 publish its ACL denies, or for any packet over its max_packet_size, and the failure PUBACK
        is lost with the reset. paho would resend the whole window first on every reconnect, so the queue would
        never move again, and the culprit cannot be told from the innocent messages sent with it. So after a
        session that died young with detections in flight, they go back to the spool and are resent one at a
        time (probing), each only once the session's own status publish was acknowledged (so the session was
        healthy before it). A detection that is alone in flight when _POISON_STRIKES probe sessions in a row
        die is moved to the spool's set_aside table (kept on disk, counted, logged); the first acknowledgement
        ends probing."""
        with self._shared.gate:  # the sender cannot publish meanwhile
            with self._lock:
                inflight = dict(self.inflight)
                probe_row = self.probe_row
            if not inflight:
                self.probing, self._strikes = False, (None, 0)
                return
            if not short:
                self.probing, self._strikes = False, (None, 0)
                if new_broker:
                    self._take_back(client, inflight)
                return
            if self.probing and probe_row is not None and probe_row in inflight.values():
                row, count = self._strikes
                count = count + 1 if row == probe_row else 1
                self._strikes = (probe_row, count)
                if count >= _POISON_STRIKES:
                    self._strikes = (None, 0)
                    self._set_aside(probe_row, f"{count} sessions in a row ended while it was the only "
                                               f"detection in flight (last: {reason})")
            self._take_back(client, inflight)
            self.probing = True

    def _take_back(self, client: paho.Client, inflight: dict[int, int]) -> None:
        """Drop ``inflight`` (paho mid -> spool id) from paho's resend queue and move the sender's cursor back
        so that it sends those spool rows again. The caller holds ``shared.gate``."""
        # paho has no public API for that; tests/mqtt/test_mqtt_publisher.py catches a paho release that changes
        # these attributes.
        with self._lock:
            self.inflight.clear()
            self.probe_row = None
        with client._out_message_mutex:
            for mid in inflight:
                client._out_messages.pop(mid, None)
        self.cursor = min(inflight.values()) - 1

    def _set_aside(self, row_id: int, why: str) -> None:
        topic = next((m.topic for m in self._spool.read_after(row_id - 1, 1) if m.id == row_id), "?")
        if not self._spool.set_aside(row_id, why):
            return
        log.error("MQTT: set aside the detections message on %s (spool id %d): %s. The messages behind it now flow; "
                  "it stays in the spool's set_aside table. Check the broker log, its ACL and its message size "
                  "limit for that topic.", topic, row_id, why)
