"""The MQTT publisher the supervisor drives: detections through a durable spool, status, health, commands.

Threads (all started by start(), all joined by stop()):
- network: connects with backoff, runs paho's loop, reports refusals; a refused connection is never "connected".
- sender:  moves spooled detections into paho (at most ``inflight_window`` unacknowledged), deletes them from
           the spool on PUBACK, expires old ones, publishes health.
- commands: runs registered command handlers off the network thread and publishes their replies.

Ordering: the spool is read in id order and paho keeps unacknowledged messages in send order and resends them
first after a reconnect (we publish new ones only once the CONNACK has been fully handled), so each camera's
detections reach the broker in sequence order. Delivery is at least once: messages in flight when a
connection or the process dies are sent again with the same message_id.
"""

from __future__ import annotations

import collections
import enum
import json
import logging
import queue
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

import appliance
from appliance.backoff import Backoff
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.connection import (build_client, describe_connect_error, describe_early_close,
                                        describe_refusal)
from appliance.mqtt.errors import CommandError, NotStartedError
from appliance.mqtt.messages import (SCHEMA_VERSION, CameraStatus, Command, DetectionsMessage,
                                     camera_status_payload, command_reply_payload, detections_payload,
                                     device_status_payload, encode, new_message_id, time_fields)
from appliance.mqtt.modes import PublishGate
from appliance.mqtt.spool import Spool, SpoolRecord, SpoolStats
from appliance.mqtt.topics import Topics, check_id

log = logging.getLogger(__name__)

CommandHandler = Callable[[Command], Optional[Mapping[str, Any]]]
HealthProvider = Callable[[], Mapping[str, Any]]
_RECENT_REQUESTS = 256
_STABLE_SESSION_S = 10.0
_POISON_STRIKES = 5    # probe sessions in a row that die with the same detection alone in flight
_DELETE_BATCH = 256
_DELETE_DELAY_S = 0.05


class Clock(Protocol):
    def time(self) -> float: ...          # wall clock, epoch seconds (timestamps, spool age)

    def monotonic(self) -> float: ...     # intervals (publish modes, uptime, health period)


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class State(str, enum.Enum):
    NEW = "new"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    STOPPED = "stopped"


class PublishResult(str, enum.Enum):
    SPOOLED = "spooled"          # durable; will be delivered
    SUPPRESSED = "suppressed"    # the camera's publish mode skipped it
    DROPPED = "dropped"          # the spool was full and the policy refused it (counted)


@dataclass(frozen=True)
class PublisherStats:
    state: State
    connects: int
    connect_failures: int
    published: int       # detections handed to the client (replays count again)
    acked: int           # detections acknowledged by the broker and removed from the spool
    rejected: int        # MQTT 5 PUBACK with a failure reason (removed: a retry would fail the same way)
    inflight: int
    suppressed: int      # skipped by a publish mode
    last_error: Optional[str]
    backoff_delays: tuple[float, ...]  # the most recent reconnect delays, newest last
    spool: SpoolStats

    @property
    def spooling(self) -> bool:
        """True while detections wait on disk rather than flow straight through."""
        return self.state is not State.CONNECTED or self.spool.backlog > self.inflight


class MqttPublisher:
    """Construct, register command handlers, start(); publish_*(); stop(). One instance per process."""

    def __init__(self, config: MqttConfig, spool_path: Path, *, clock: Optional[Clock] = None,
                 versions: Optional[Mapping[str, str]] = None, rng: Optional[random.Random] = None) -> None:
        self.config = config
        self.topics = Topics(config.topic_prefix, config.device_id)
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._versions = {"appliance": appliance.__version__, "schema": str(SCHEMA_VERSION), **(versions or {})}
        self._spool = Spool(spool_path, config.spool, clock=self._clock.time)
        self._client: Optional[paho.Client] = None
        self._lock = threading.Lock()          # state and counters
        self._gate = threading.Lock()          # sender publishing vs. network thread reconnecting
        self._wake = threading.Event()
        self._sender_idle = False              # True only while the sender waits; producers wake it only then
        self._halt = threading.Event()         # network thread: disconnect and exit
        self._stop_sender = threading.Event()
        self._connected_evt = threading.Event()
        self._state = State.NEW
        self._started = False
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._acks: collections.deque[tuple[int, Any]] = collections.deque()
        self._inflight: dict[int, int] = {}    # paho mid -> spool id (sender thread only)
        self._to_delete: list[int] = []        # acknowledged, not yet deleted (sender thread only)
        self._rejected_pending = 0
        self._delete_due: Optional[float] = None
        self._cursor = 0                       # highest spool id handed to paho (sender thread only)
        self._window = config.inflight_window
        self._gates: dict[str, PublishGate] = {}
        self._detection_topics: dict[str, str] = {}
        self._retained: dict[str, bytes] = {}  # camera status topic -> payload, republished on reconnect
        self._handlers: dict[str, CommandHandler] = {}
        self._commands: queue.Queue[Optional[tuple[str, bytes, Optional[str], Optional[bytes]]]] = queue.Queue()
        self._recent: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._health_provider: Optional[HealthProvider] = None
        self._connack: Optional[tuple[Any, Any]] = None
        self._disconnect_reason: Optional[str] = None
        self._socket_error: Optional[str] = None  # paho reports socket/TLS read errors only through on_log
        self._started_mono = 0.0
        self._connects = self._connect_failures = self._published = self._acked = 0
        self._rejected = self._suppressed = 0
        self._last_error: Optional[str] = None
        self._backoff_delays: collections.deque[float] = collections.deque(maxlen=16)
        # Probing (see _after_session): after a session dies young with detections in flight, they are
        # resent one at a time, each only after this session's own status publish was acknowledged.
        self._probing = False
        self._probe_row: Optional[int] = None     # spool id sent alone in this probe session (sender sets it)
        self._strikes: tuple[Optional[int], int] = (None, 0)  # (spool id, probe sessions it died alone in)
        self._status_mid: Optional[int] = None
        self._status_acked = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the spool and start connecting in the background. The broker need not be up: detections spool.

        Raises SpoolError (spool unusable) or MqttConfigError (TLS material, password file)."""
        if self._started:
            raise NotStartedError("start() was already called; create a new MqttPublisher to start again")
        will = encode(device_status_payload(self.config.device_id, "offline", None, self._versions,
                                            reason="connection lost"))
        client = build_client(self.config, self.topics.device_status, will, self.config.qos.status)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_message = self._on_message
        client.on_log = self._on_log
        self._spool.open()
        self._client = client
        self._started = True
        self._started_mono = self._clock.monotonic()
        self._set_state(State.CONNECTING)
        for name, target in (("mqtt-network", self._network_loop), ("mqtt-sender", self._sender_loop),
                             ("mqtt-commands", self._command_loop)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Wait up to ``timeout`` for in-flight acknowledgements, publish 'offline' (a clean stop, so the broker
        discards the last will), disconnect and close the spool. Unacknowledged detections stay in the spool
        and are replayed by the next start."""
        if not self._started or self._state is State.STOPPED:
            self._set_state(State.STOPPED)
            return
        deadline = time.monotonic() + timeout
        self._closing = True
        while self._state is State.CONNECTED and time.monotonic() < deadline:
            with self._lock:
                pending = len(self._inflight)
            if not pending:
                break
            self._wake.set()
            time.sleep(0.02)
        client = self._client
        assert client is not None
        if self._state is State.CONNECTED:
            payload = encode(device_status_payload(self.config.device_id, "offline", self._clock.time(),
                                                   self._versions, reason="stopped"))
            info = client.publish(self.topics.device_status, payload, qos=self.config.qos.status, retain=True)
            try:
                info.wait_for_publish(max(0.1, deadline - time.monotonic()))
            except (RuntimeError, ValueError):
                pass  # not queued: the connection just dropped; the broker will send the last will instead
        self._halt.set()
        self._stop_sender.set()
        self._wake.set()
        self._commands.put(None)
        for thread in self._threads:
            thread.join(max(1.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.error("MQTT %s thread did not stop in time", thread.name)
        self._process_acks(flush=True)
        self._spool.close()
        self._connected_evt.clear()
        self._set_state(State.STOPPED)
        log.info("MQTT publisher stopped; %d detections stay spooled for the next start", self._spool.stats().backlog)

    def __enter__(self) -> "MqttPublisher":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def state(self) -> State:
        return self._state

    def wait_connected(self, timeout: float) -> bool:
        return self._connected_evt.wait(timeout)

    def wait_idle(self, timeout: float) -> bool:
        """True once the spool is empty and nothing is in flight (all detections acknowledged)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                inflight = len(self._inflight)
            if not inflight and self._spool.stats().backlog == 0:
                return True
            self._wake.set()
            time.sleep(0.02)
        return False

    def stats(self) -> PublisherStats:
        with self._lock:
            return PublisherStats(self._state, self._connects, self._connect_failures, self._published,
                                  self._acked, self._rejected, len(self._inflight), self._suppressed,
                                  self._last_error, tuple(self._backoff_delays), self._spool.stats())

    def _set_state(self, state: State) -> None:
        with self._lock:
            self._state = state
        if state is State.CONNECTED:
            self._connected_evt.set()
        else:
            self._connected_evt.clear()

    def _require_running(self) -> None:
        if not self._started:
            raise NotStartedError("MqttPublisher.start() must be called before publishing")
        if self._closing or self._state is State.STOPPED:
            raise NotStartedError("the MqttPublisher is stopping or stopped; nothing more is accepted")

    # -- what the supervisor publishes ---------------------------------------------------------------------

    def publish_detections(self, message: DetectionsMessage) -> PublishResult:
        """Spool one frame's detections; returns once durable (see SpoolConfig.synchronous). Thread-safe; call
        it from one thread per camera so publish modes see frames in order."""
        return self.publish_detections_many([message])[0]

    def publish_detections_many(self, messages: Sequence[DetectionsMessage]) -> list[PublishResult]:
        """Like publish_detections for a batch, committed in one transaction (cheaper with synchronous=full)."""
        self._require_running()
        results: list[PublishResult] = []
        records: list[SpoolRecord] = []
        now = self._clock.monotonic()
        qos = self.config.qos.detections
        for msg in messages:
            if not isinstance(msg, DetectionsMessage):
                raise TypeError(f"expected DetectionsMessage, got {type(msg).__name__}")
            topic = self._detection_topics.get(msg.camera_id)
            if topic is None:  # checks the camera id once, not per frame
                topic = self._detection_topics.setdefault(msg.camera_id, self.topics.detections(msg.camera_id))
            gate = self._gates.get(msg.camera_id)
            if gate is None:
                gate = self._gates.setdefault(msg.camera_id, PublishGate(self.config.publish_config(msg.camera_id)))
            if not gate.admit(msg.detections, now):
                results.append(PublishResult.SUPPRESSED)
                continue
            payload = encode(detections_payload(msg, self.config.device_id, msg.message_id or new_message_id()))
            records.append(SpoolRecord(topic, payload, qos))
            results.append(PublishResult.SPOOLED)
        suppressed = sum(r is PublishResult.SUPPRESSED for r in results)
        if suppressed:
            with self._lock:
                self._suppressed += suppressed
        if records:
            kept = self._spool.append(records)
            self._nudge()
            if kept < len(records):
                # The spool keeps a prefix of a batch under drop_newest/block; mark the refused tail.
                refused = len(records) - kept
                for i in range(len(results) - 1, -1, -1):
                    if refused and results[i] is PublishResult.SPOOLED:
                        results[i] = PublishResult.DROPPED
                        refused -= 1
        return results

    def publish_camera_status(self, status: CameraStatus) -> None:
        """Retained camera status; remembered and republished after every reconnect."""
        self._require_running()
        topic = self.topics.camera_status(status.camera_id)
        payload = encode(camera_status_payload(status, self.config.device_id, self._clock.time()))
        with self._lock:
            self._retained[topic] = payload
        if self._state is State.CONNECTED and self._client is not None:
            self._client.publish(topic, payload, qos=self.config.qos.status, retain=True)

    def publish_device_event(self, suffix: str, payload: Mapping[str, Any], qos: Optional[int] = None,
                             retain: bool = False) -> None:
        """Publish ``payload`` (JSON) on ``<prefix>/<device>/<suffix>`` now if connected (QoS default: the status
        QoS). Not spooled: a retained event is remembered and republished after every reconnect (the latest
        per topic); an unretained one published while disconnected is lost."""
        self._require_running()
        topic = self.topics.device_topic(suffix)
        data = encode(payload)
        qos = self.config.qos.status if qos is None else qos
        if retain:
            with self._lock:
                self._retained[topic] = data
        if self._state is State.CONNECTED and self._client is not None:
            self._client.publish(topic, data, qos=qos, retain=retain)

    def set_health_provider(self, provider: Optional[HealthProvider]) -> None:
        """``provider()`` returns {"cameras": {id: {name: value}}, "system": {name: value}} for each health
        message (values: numbers, strings, booleans or null); the publisher adds its own MQTT and spool state."""
        self._health_provider = provider

    def on_command(self, name: str, handler: CommandHandler) -> None:
        """Run ``handler(command)`` for <prefix>/<device>/command/<name>; its returned mapping is the reply's
        result. Raise CommandError for a clean failure reply. Handlers run on one worker thread, in order."""
        check_id("command name", name)
        self._handlers[name] = handler

    def publish_health_now(self) -> None:
        """Publish a health message immediately (it is also published every health_interval_s)."""
        self._require_running()
        self._publish_health()

    def health_payload(self) -> dict[str, Any]:
        stats = self.stats()
        extra: Mapping[str, Any] = {}
        if self._health_provider is not None:
            try:
                extra = self._health_provider() or {}
            except Exception:  # a broken provider must not silence health
                log.exception("MQTT health provider failed; publishing health without camera/system readings")
        payload: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": "health",
                                   "device_id": self.config.device_id}
        payload.update(time_fields(self._clock.time()))
        payload["uptime_s"] = round(max(0.0, self._clock.monotonic() - self._started_mono), 3)
        mqtt: dict[str, Any] = {"state": stats.state.value, "connects": stats.connects,
                                "connect_failures": stats.connect_failures, "published": stats.published,
                                "acked": stats.acked, "rejected": stats.rejected, "inflight": stats.inflight,
                                "suppressed": stats.suppressed}
        if stats.last_error:
            mqtt["last_error"] = stats.last_error
        payload["mqtt"] = mqtt
        s = stats.spool
        payload["spool"] = {"backlog": s.backlog, "bytes": s.bytes, "max_bytes": s.max_bytes, "spooled": s.spooled,
                            "dropped_oldest": s.dropped_oldest, "dropped_newest": s.dropped_newest,
                            "dropped_expired": s.dropped_expired, "set_aside": s.set_aside}
        payload["cameras"] = dict(extra.get("cameras", {}))
        payload["system"] = dict(extra.get("system", {}))
        return payload

    def _publish_health(self) -> None:
        client = self._client
        if client is None or self._state is not State.CONNECTED:
            return
        try:
            payload = encode(self.health_payload())
        except (TypeError, ValueError) as exc:
            log.error("MQTT health payload is not JSON (%s); check the health provider's values", exc)
            return
        client.publish(self.topics.health, payload, qos=self.config.qos.health)

    # -- paho callbacks (network thread, inside client.loop()) ---------------------------------------------

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._connack = (reason, properties)

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._disconnect_reason = str(reason)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        if mid == self._status_mid:
            self._status_acked.set()
        self._acks.append((mid, reason))
        self._nudge()

    def _on_log(self, client: paho.Client, userdata: Any, level: int, buf: str) -> None:
        # Keep the first error of a session: it is the cause; later ones are consequences.
        if level == paho.MQTT_LOG_ERR and self._socket_error is None:
            self._socket_error = buf

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        name = self.topics.command_name(msg.topic)
        if name is None:
            return
        if msg.retain:
            log.warning("MQTT: ignoring retained command on %s (a stale command must not run on reconnect); "
                        "publish commands without the retain flag", msg.topic)
            return
        props = getattr(msg, "properties", None)
        response_topic = getattr(props, "ResponseTopic", None) if props is not None else None
        correlation = getattr(props, "CorrelationData", None) if props is not None else None
        self._commands.put((name, bytes(msg.payload), response_topic, correlation))

    # -- network thread ------------------------------------------------------------------------------------

    def _network_loop(self) -> None:
        backoff = Backoff(self.config.backoff, self._rng)
        cfg = self.config
        while not self._halt.is_set():
            began = time.monotonic()
            was_connected, reason = self._run_session()
            if self._halt.is_set():
                break
            self._set_state(State.CONNECTING)
            short = time.monotonic() - began < _STABLE_SESSION_S
            if was_connected:
                self._after_session(short, reason)
                if not short:
                    backoff.reset()  # only a session that held; a broker that drops us at once gets backoff
            else:
                with self._lock:
                    self._connect_failures += 1
            with self._lock:
                self._last_error = reason
            delay = backoff.next_delay()
            self._backoff_delays.append(delay)
            backlog = self._spool.stats().backlog
            if was_connected:
                hint = ""
                if short:
                    hint = (f" (dropped soon after connecting: if it repeats, check the broker log and its ACL "
                            f"for {self.topics.base}/#)")
                log.warning("MQTT connection to %s:%d lost (%s)%s; detections spool on disk (%d queued); "
                            "reconnecting in %.1f s", cfg.host, cfg.port, reason, hint, backlog, delay)
            else:
                log.warning("MQTT connect failed: %s; retry %d in %.1f s; %d detections spooled", reason,
                            backoff.failures, delay, backlog)
            self._halt.wait(delay)
        self._set_state(State.STOPPED if self._closing else self._state)

    def _run_session(self) -> tuple[bool, str]:
        """One connection attempt and, if it succeeds, the session until it ends. (was_connected, reason)."""
        client = self._client
        assert client is not None
        with self._gate:
            self._set_state(State.CONNECTING)
            self._connack = None
            self._disconnect_reason = None
            self._socket_error = None
            try:
                client.reconnect()
            except Exception as exc:  # socket, TLS and DNS errors all mean "not connected; retry"
                return False, describe_connect_error(exc, self.config)
        deadline = time.monotonic() + self.config.connect_timeout_s
        connected = False
        while True:
            if self._halt.is_set():
                self._disconnect(client)
                return connected, "stopping"
            rc = client.loop(timeout=0.2 if connected else 0.05)
            if not connected and self._connack is not None:
                reason, properties = self._connack
                if reason.is_failure:
                    return False, describe_refusal(reason, self.config)
                connected = True
                self._session_up(client, properties)
            if rc != paho.MQTT_ERR_SUCCESS:
                detail = self._socket_error or self._disconnect_reason or paho.error_string(rc)
                if connected:
                    return True, detail
                return False, describe_early_close(detail, self.config)
            if not connected and time.monotonic() > deadline:
                return False, f"no CONNACK from {self.config.host}:{self.config.port} within " \
                              f"{self.config.connect_timeout_s} s"

    def _session_up(self, client: paho.Client, properties: Any) -> None:
        # Runs after paho has re-queued the previous session's unacknowledged messages, so everything the
        # sender publishes from here on goes out after them.
        receive_max = getattr(properties, "ReceiveMaximum", None) if properties is not None else None
        window = self.config.inflight_window
        if receive_max:
            # MQTT 5: exceeding the broker's Receive Maximum is a protocol error; keep room for status/replies.
            window = max(1, min(window, receive_max - min(4, receive_max // 4)))
        self._window = window
        qos = self.config.qos
        client.subscribe(self.topics.command_filter, qos=qos.commands)
        online = encode(device_status_payload(self.config.device_id, "online", self._clock.time(), self._versions))
        self._status_acked.clear()
        info = client.publish(self.topics.device_status, online, qos=qos.status, retain=True)
        self._status_mid = info.mid
        if qos.status == 0:
            self._status_acked.set()
        with self._lock:
            retained = list(self._retained.items())
            self._connects += 1
            self._last_error = None
        for topic, payload in retained:
            client.publish(topic, payload, qos=qos.status, retain=True)
        backlog = self._spool.stats().backlog
        log.info("MQTT connected to %s:%d as %s (MQTT %s, window %d); %d spooled detections to send",
                 self.config.host, self.config.port, self.config.effective_client_id, self.config.protocol,
                 window, backlog)
        with self._gate:
            self._set_state(State.CONNECTED)
        self._wake.set()

    def _after_session(self, short: bool, reason: str) -> None:
        """Between sessions (network thread): find a detection that kills sessions and set it aside.

        Some brokers close the connection instead of (or right after) refusing a publish: mosquitto 2.0 does so
        for an MQTT 5 publish its ACL denies, or for any packet over its max_packet_size, and the failure PUBACK
        is lost with the reset. paho would resend the whole window first on every reconnect, so the queue would
        never move again, and the culprit cannot be told from the innocent messages sent with it. So after a
        session that died young with detections in flight, they go back to the spool and are resent one at a
        time (probing), each only once the session's own status publish was acknowledged (so the session was
        healthy before it). A detection that is alone in flight when _POISON_STRIKES probe sessions in a row
        die is moved to the spool's set_aside table (kept on disk, counted, logged); the first acknowledgement
        ends probing."""
        client = self._client
        assert client is not None
        with self._gate:  # the sender cannot publish meanwhile
            with self._lock:
                inflight = dict(self._inflight)
                probe_row = self._probe_row
            if not short or not inflight:
                self._probing, self._strikes = False, (None, 0)
                return
            if self._probing and probe_row is not None and probe_row in inflight.values():
                row, count = self._strikes
                count = count + 1 if row == probe_row else 1
                self._strikes = (probe_row, count)
                if count >= _POISON_STRIKES:
                    self._strikes = (None, 0)
                    self._set_aside(probe_row, f"{count} sessions in a row ended while it was the only "
                                               f"detection in flight (last: {reason})")
            # Take the window back from paho (it has no public API for that; tests/mqtt/test_mqtt_publisher.py
            # catches a paho release that changes these attributes) and let the sender resend from the spool.
            with self._lock:
                self._inflight.clear()
                self._probe_row = None
            with client._out_message_mutex:
                for mid in inflight:
                    client._out_messages.pop(mid, None)
            self._cursor = min(inflight.values()) - 1
            self._probing = True

    def _set_aside(self, row_id: int, why: str) -> None:
        topic = next((m.topic for m in self._spool.read_after(row_id - 1, 1) if m.id == row_id), "?")
        if not self._spool.set_aside(row_id, why):
            return
        log.error("MQTT: set aside the detections message on %s (spool id %d): %s. The messages behind it now flow; "
                  "it stays in the spool's set_aside table. Check the broker log, its ACL and its message size "
                  "limit for that topic.", topic, row_id, why)

    def _disconnect(self, client: paho.Client) -> None:
        if client.disconnect() != paho.MQTT_ERR_SUCCESS:
            return
        end = time.monotonic() + 1.0
        while time.monotonic() < end and client.want_write():
            if client.loop(timeout=0.05) != paho.MQTT_ERR_SUCCESS:
                break

    # -- sender thread -------------------------------------------------------------------------------------

    def _sender_loop(self) -> None:
        next_expire = 0.0
        next_health = self._clock.monotonic() + self.config.health_interval_s
        while not self._stop_sender.is_set():
            self._sender_idle = True
            # Re-check after announcing idleness: a producer that appended before it saw us busy and did not
            # wake us. Waking the sender per message costs more than the message itself on a 2-core box.
            if not self._has_work():
                timeout = 0.25
                if self._delete_due is not None:
                    timeout = min(timeout, max(0.0, self._delete_due - time.monotonic()))
                self._wake.wait(timeout)
            self._sender_idle = False
            self._wake.clear()
            try:
                self._process_acks()
                now = self._clock.monotonic()
                if now >= next_expire:
                    self._spool.expire()
                    next_expire = now + 1.0
                if now >= next_health:
                    next_health = now + self.config.health_interval_s
                    self._publish_health()
                self._fill_window()
            except Exception:  # keep sending; the spool keeps everything meanwhile
                log.exception("MQTT sender error; retrying in 1 s")
                self._stop_sender.wait(1.0)

    def _nudge(self) -> None:
        if self._sender_idle:
            self._wake.set()

    def _has_work(self) -> bool:
        if self._acks or self._stop_sender.is_set():
            return True
        return (self._state is State.CONNECTED and not self._closing and self._spool.last_id > self._cursor
                and len(self._inflight) < self._current_window())

    def _current_window(self) -> int:
        """How many detections may be unacknowledged now: while probing (see _after_session), one, and only
        once this session's status publish was acknowledged."""
        if self._probing:
            return 1 if self._status_acked.is_set() else 0
        return self._window

    def _process_acks(self, flush: bool = False) -> None:
        done: list[int] = []
        rejected = 0
        while True:
            try:
                mid, reason = self._acks.popleft()
            except IndexError:
                break
            with self._lock:
                row_id = self._inflight.pop(mid, None)
            if row_id is None:
                continue  # status, health or reply
            if self._probing and row_id == self._probe_row:
                self._probing = False  # the broker answered: the session is healthy again
            if getattr(reason, "is_failure", False):
                rejected += 1
                log.error("MQTT broker rejected a detections message (spool id %d): %s; check the broker ACL "
                          "for %s/#", row_id, reason, self.topics.base)
            done.append(row_id)
        if rejected:
            with self._lock:
                self._rejected += rejected
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
            with self._lock:
                self._acked += len(ids) - rejected_in_batch

    def _fill_window(self) -> None:
        if self._closing:
            return
        qos0_sent: list[int] = []
        with self._gate:
            client = self._client
            if client is None or self._state is not State.CONNECTED:
                return
            with self._lock:
                room = self._current_window() - len(self._inflight)
            if room <= 0:
                return
            rows = self._spool.read_after(self._cursor, room)
            for row in rows:
                info = client.publish(row.topic, row.payload, qos=row.qos)
                if info.rc not in (paho.MQTT_ERR_SUCCESS, paho.MQTT_ERR_NO_CONN):
                    log.error("MQTT client refused to queue a detections message: %s", paho.error_string(info.rc))
                    break
                self._cursor = row.id
                with self._lock:
                    self._published += 1
                    if row.qos > 0:
                        self._inflight[info.mid] = row.id
                        if self._probing:
                            self._probe_row = row.id
                if row.qos == 0:
                    qos0_sent.append(row.id)
        if qos0_sent:
            self._spool.delete(qos0_sent)  # QoS 0: best effort once handed to the client
            with self._lock:
                self._acked += len(qos0_sent)
        if len(rows) == room:
            self._wake.set()  # more may be waiting; the acks will make room

    # -- command thread ------------------------------------------------------------------------------------

    def _command_loop(self) -> None:
        while True:
            item = self._commands.get()
            if item is None:
                return
            name, payload, response_topic, correlation = item
            try:
                self._run_command(name, payload, response_topic, correlation)
            except Exception:
                log.exception("MQTT command %r: could not reply", name)

    def _run_command(self, name: str, raw: bytes, response_topic: Optional[str],
                     correlation: Optional[bytes]) -> None:
        result: Optional[Mapping[str, Any]] = None
        request_id, args, error = _parse_command(raw)
        if request_id is not None and request_id in self._recent:
            log.info("MQTT command %s request_id=%s is a repeat; resending the first reply", name, request_id)
            self._send_reply(self._recent[request_id], response_topic, correlation)
            return
        handler = self._handlers.get(name)
        if error is None and handler is None:
            known = ", ".join(sorted(self._handlers)) or "none"
            error = ("unknown_command", f"unknown command {name!r}; known: {known}")
        if error is None and handler is not None:
            try:
                result = handler(Command(name, request_id, args, self.topics.command(name))) or {}
                if not isinstance(result, Mapping):
                    raise TypeError(f"handler returned {type(result).__name__}, not a mapping")
            except CommandError as exc:
                error = (exc.code, exc.message)
            except Exception as exc:
                log.exception("MQTT command %s request_id=%s failed", name, request_id)
                error = ("internal", f"{type(exc).__name__}: {exc}")
        try:
            reply = encode(command_reply_payload(self.config.device_id, name, request_id, self._clock.time(),
                                                 result=result, error=error))
        except (TypeError, ValueError) as exc:
            reply = encode(command_reply_payload(self.config.device_id, name, request_id, self._clock.time(),
                                                 error=("internal", f"result is not JSON: {exc}")))
        if request_id is not None:
            self._recent[request_id] = reply
            while len(self._recent) > _RECENT_REQUESTS:
                self._recent.popitem(last=False)
        self._send_reply(reply, response_topic, correlation)

    def _send_reply(self, reply: bytes, response_topic: Optional[str], correlation: Optional[bytes]) -> None:
        client = self._client
        if client is None:
            return
        props = None
        if self.config.protocol == "5" and correlation is not None:
            props = Properties(PacketTypes.PUBLISH)
            props.CorrelationData = correlation
        client.publish(response_topic or self.topics.reply, reply, qos=self.config.qos.replies, properties=props)


def _parse_command(raw: bytes) -> tuple[Optional[str], dict[str, Any], Optional[tuple[str, str]]]:
    """(request_id, args, error). The request id is returned whenever it is readable, so that even an error
    reply can be matched by the caller."""
    if not raw.strip():
        return None, {}, None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, {}, ("bad_request", f"payload is not UTF-8 JSON: {exc}")
    if not isinstance(doc, dict):
        return None, {}, ("bad_request", f"payload must be a JSON object, got {type(doc).__name__}")
    request_id = doc.get("request_id")
    if request_id is not None and (not isinstance(request_id, str) or not 1 <= len(request_id) <= 128):
        return None, {}, ("bad_request", "request_id must be a string of 1-128 characters")
    unknown = sorted(set(doc) - {"request_id", "args"})
    if unknown:
        return request_id, {}, ("bad_request", f"unknown keys {unknown}; a command has only 'request_id' and 'args'")
    args = doc.get("args", {})
    if not isinstance(args, dict):
        return request_id, {}, ("bad_request", f"args must be a JSON object, got {type(args).__name__}")
    return request_id, args, None
