"""The sender: moves spooled detections into paho, and acknowledged ones out of the spool.

PUBACKs become spool deletes in batches, which saves a commit per message; a crash in between only means a
duplicate on replay, since delivery is at least once anyway."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Optional

import paho.mqtt.client as paho

from appliance.mqtt.shared import State

if TYPE_CHECKING:
    from appliance.mqtt.config import MqttConfig
    from appliance.mqtt.shared import Clock, Shared
    from appliance.mqtt.spool import Spool
    from appliance.mqtt.window import InflightWindow

log = logging.getLogger(__name__)

_DELETE_BATCH = 256
_DELETE_DELAY_S = 0.05


class Sender:
    """Threading contract.

    - sender thread: ``run`` and everything it calls; ``_to_delete``, ``_rejected_pending`` and ``_delete_due`` are
      its alone.
    - the stopping thread: ``request_stop`` (any time), then ``process_acks(flush=True)`` once the sender thread has
      been joined, so the batch state is never touched by two threads at once.
    - ``shared.gate`` is held while publishing (the network thread holds it while reconnecting and taking the window
      back); ``shared.lock`` guards the counters and the window's in-flight map.
    """

    def __init__(self, config: MqttConfig, shared: Shared, spool: Spool, window: InflightWindow, clock: Clock,
                 publish_health: Callable[[], None], each_second: Callable[[], None] = lambda: None) -> None:
        """``each_second``: housekeeping on this thread beside the spool's age bound (the holdback's retry)."""
        self._config = config
        self._shared = shared
        self._spool = spool
        self._window = window
        self._clock = clock
        self._publish_health = publish_health
        self._each_second = each_second
        self._stop = threading.Event()
        self._to_delete: list[int] = []        # acknowledged, not yet deleted
        self._rejected_pending = 0
        self._delete_due: Optional[float] = None

    def request_stop(self) -> None:
        self._stop.set()
        self._shared.wake.set()

    def run(self) -> None:
        shared = self._shared
        next_expire = 0.0
        next_health = self._clock.monotonic() + self._config.health_interval_s
        while not self._stop.is_set():
            shared.sender_idle = True
            # Re-check after announcing idleness: a producer that appended before it saw us busy and did not
            # wake us. Waking the sender per message costs more than the message itself on a 2-core box.
            if not self._has_work():
                timeout = 0.25
                if self._delete_due is not None:
                    timeout = min(timeout, max(0.0, self._delete_due - time.monotonic()))
                shared.wake.wait(timeout)
            shared.sender_idle = False
            shared.wake.clear()
            try:
                self.process_acks()
                now = self._clock.monotonic()
                if now >= next_expire:
                    self._spool.expire()
                    self._each_second()
                    next_expire = now + 1.0
                if now >= next_health:
                    next_health = now + self._config.health_interval_s
                    self._publish_health()
                self._fill_window()
            except Exception:  # keep sending; the spool keeps everything meanwhile
                log.exception("MQTT sender error; retrying in 1 s")
                self._stop.wait(1.0)

    def _has_work(self) -> bool:
        window = self._window
        if window.acks or self._stop.is_set():
            return True
        return (self._shared.state is State.CONNECTED and not self._shared.closing
                and self._spool.last_id > window.cursor and len(window.inflight) < window.limit())

    def process_acks(self, flush: bool = False) -> None:
        done, rejected = self._window.drain_acks()
        if rejected:
            with self._shared.lock:
                self._shared.rejected += rejected
        self._to_delete.extend(done)
        self._rejected_pending += rejected
        if not self._to_delete:
            return
        now = time.monotonic()
        if self._delete_due is None:
            self._delete_due = now + _DELETE_DELAY_S
        # Deleting in batches saves a commit per message; a crash in between only means a duplicate on replay.
        if flush or len(self._to_delete) >= _DELETE_BATCH or now >= self._delete_due:
            ids, self._to_delete = self._to_delete, []
            rejected_in_batch, self._rejected_pending = self._rejected_pending, 0
            self._delete_due = None
            self._spool.delete(ids)
            with self._shared.lock:
                self._shared.acked += len(ids) - rejected_in_batch

    def _fill_window(self) -> None:
        shared, window = self._shared, self._window
        if shared.closing:
            return
        qos0_sent: list[int] = []
        with shared.gate:
            client = shared.client
            if client is None or shared.state is not State.CONNECTED:
                return
            with shared.lock:
                room = window.limit() - len(window.inflight)
            if room <= 0:
                return
            rows = self._spool.read_after(window.cursor, room)
            for row in rows:
                info = client.publish(row.topic, row.payload, qos=row.qos)
                if info.rc not in (paho.MQTT_ERR_SUCCESS, paho.MQTT_ERR_NO_CONN):
                    log.error("MQTT client refused to queue a detections message: %s", paho.error_string(info.rc))
                    break
                window.cursor = row.id
                with shared.lock:
                    shared.published += 1
                    if row.qos > 0:
                        window.record_sent(info.mid, row.id)
                if row.qos == 0:
                    qos0_sent.append(row.id)
        if qos0_sent:
            self._spool.delete(qos0_sent)  # QoS 0: best effort once handed to the client
            with shared.lock:
                shared.acked += len(qos0_sent)
        if len(rows) == room:
            shared.wake.set()  # more may be waiting; the acks will make room
