"""The MQTT publisher the supervisor drives: detections through a durable spool, status, health, commands.

``MqttPublisher`` is the façade: it wires the session, the in-flight window, the sender and the command runner,
starts their three threads in ``start()`` and joins them in ``stop()``. Which part owns which thread and lock, and
why each camera's detections reach the broker in order: docs/mqtt.md, "Inside the publisher"."""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import appliance
from appliance.events import Event
from appliance.mqtt import messages as wire
from appliance.mqtt.authz import CommandAuthorizer, SignatureCheck
from appliance.mqtt.commands import CommandHandler, CommandRunner, ReadOnly
from appliance.mqtt.config import MqttConfig, PublishConfig
from appliance.mqtt.errors import NotStartedError
from appliance.mqtt.healthreport import HealthProvider, HealthReport
from appliance.mqtt.holdback import Held, Holdback, gap_payload
from appliance.mqtt.messages import CameraStatus, ClipMessage, DetectionsMessage
from appliance.mqtt.modes import PublishGate
from appliance.mqtt.nonces import NonceStore
from appliance.mqtt.numbering import MessageCounter
from appliance.mqtt.sender import Sender
from appliance.mqtt.session import MessageHandler, Session
from appliance.mqtt.shared import Clock, PublisherStats, PublishResult, Shared, State, SystemClock
from appliance.mqtt.spool import Spool, SpoolRecord
from appliance.mqtt.topics import Topics
from appliance.mqtt.window import InflightWindow

__all__ = ["Clock", "CommandHandler", "HealthProvider", "MessageHandler", "MqttPublisher", "PublishResult",
           "PublisherStats", "State", "SystemClock"]

log = logging.getLogger(__name__)

class MqttPublisher:
    """Construct, register command handlers, start(); publish_*(); stop(). One instance per process."""

    def __init__(self, config: MqttConfig, spool_path: Path, *, clock: Optional[Clock] = None,
                 versions: Optional[Mapping[str, str]] = None, rng: Optional[random.Random] = None,
                 boot_id: Optional[str] = None, signature_check: Optional[SignatureCheck] = None,
                 nonce_path: Optional[Path] = None, group: Optional[str] = None) -> None:
        """``boot_id`` (32 hex digits) names this publisher's numbering of detections; a new one by default.
        ``signature_check`` verifies signed commands (appliance.ota.commandsig.signature_check; None: a signed
        command is refused as unknown_key); ``nonce_path`` keeps their nonces (default: beside the spool).
        ``group``: the device's fleet group (``ota.group``), named in its retained status."""
        self.config = config
        self.topics = Topics(config.topic_prefix, config.device_id)
        self._clock = clock or SystemClock()
        self._versions = {"appliance": appliance.__version__, "schema": str(wire.SCHEMA_VERSION), **(versions or {})}
        self._spool = Spool(spool_path, config.spool, clock=self._clock.time)
        self._shared = Shared()
        self._window = InflightWindow(config.inflight_window, self._shared, self._spool, self.topics.base)
        nonces = NonceStore(nonce_path or Path(spool_path).with_name("command-nonces.log"))
        self._authorizer = CommandAuthorizer(config.commands, self.topics, signature_check, nonces)
        self._commands = CommandRunner(config, self.topics, self._clock, self._shared, self._authorizer)
        self._group = group
        self._session = Session(config, self.topics, self._clock, rng or random.Random(), self._versions,
                                self._shared, self._spool, self._window, self._commands, group)
        self._health = HealthReport(self.stats, lambda: self.config, self._shared, self.topics, self._clock)
        self._sender = self._new_sender(config)
        self._started = False
        self._threads: list[threading.Thread] = []
        self._gates: dict[str, PublishGate] = {}
        self._numbers = MessageCounter(boot_id)  # after the publish gate, before the spool: docs/mqtt.md
        self._holdback = Holdback(self._spool, config.spool.memory_bytes, self._gap_record)
        self._detection_topics: dict[str, str] = {}

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the spool and start connecting in the background. The broker need not be up: detections spool.

        Raises SpoolError (spool unusable) or MqttConfigError (TLS material, password file)."""
        if self._started:
            raise NotStartedError("start() was already called; create a new MqttPublisher to start again")
        client = self._session.create_client()
        self._spool.open()
        self._shared.client = client
        self._started = True
        self._health.started_mono = self._clock.monotonic()
        self._shared.set_state(State.CONNECTING)
        for name, target in (("mqtt-network", self._session.run), ("mqtt-sender", self._sender.run),
                             ("mqtt-commands", self._commands.run)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Wait up to ``timeout`` for in-flight acknowledgements, publish 'offline' (a clean stop, so the broker
        discards the last will), disconnect and close the spool. Unacknowledged detections stay in the spool
        and are replayed by the next start."""
        shared = self._shared
        if not self._started or shared.state is State.STOPPED:
            shared.set_state(State.STOPPED)
            return
        deadline = time.monotonic() + timeout
        shared.closing = True
        while shared.state is State.CONNECTED and time.monotonic() < deadline:
            if not self._window.pending():
                break
            shared.wake.set()
            time.sleep(0.02)
        assert shared.client is not None
        if shared.state is State.CONNECTED:
            self._session.publish_offline(deadline)
        self._session.halt()
        self._sender.request_stop()
        self._commands.close()
        for thread in self._threads:
            thread.join(max(1.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.error("MQTT %s thread did not stop in time", thread.name)
        self._sender.process_acks(flush=True)
        self._holdback.drop_all("stopped")  # after a last try to write them
        self._spool.close()
        self._authorizer.close()
        shared.connected_evt.clear()
        shared.set_state(State.STOPPED)
        log.info("MQTT publisher stopped; %d detections stay spooled for the next start", self._spool.stats().backlog)

    # The settings a reconnect takes over; the others (topics, spool, signed commands, publish modes) stay as they
    # are: the topics and the spool are in use by every camera, publish modes have set_publish_modes.
    KEPT_ON_RECONNECT = ("device_id", "topic_prefix", "spool", "commands", "publish", "cameras", "sparkplug")

    def reconnect(self, config: MqttConfig) -> None:
        """Take ``config``'s connection settings (brokers, credentials, TLS, client id, protocol, keepalive, QoS,
        window, backoff, health period) without stopping the publisher: the current session ends cleanly (its
        in-flight detections get until their acknowledgements or ``connect_timeout_s``), a client built from
        ``config`` starts a new one on the same spool. Nothing spooled is lost: a detection sent but not
        acknowledged is sent again from the spool (at least once). ``KEPT_ON_RECONNECT`` keep their values.
        Raises MqttConfigError (TLS material, password file) before anything is touched."""
        self._require_running()
        shared, old = self._shared, self.config
        config = config.model_copy(update={key: getattr(old, key) for key in self.KEPT_ON_RECONNECT})
        session = Session(config, self.topics, self._clock, random.Random(), self._versions, shared, self._spool,
                          self._window, self._commands, self._group)
        client = session.create_client()  # raises here, with the running session untouched
        deadline = time.monotonic() + old.connect_timeout_s
        while shared.state is State.CONNECTED and self._window.pending() and time.monotonic() < deadline:
            shared.wake.set()
            time.sleep(0.02)
        if shared.state is State.CONNECTED and config.brokers != old.brokers:
            self._session.publish_offline(deadline)  # the old broker does not keep saying "online"
        self._session.halt()
        self._sender.request_stop()
        for thread in self._threads[:2]:  # the network and the sender thread (start's order)
            thread.join(old.connect_timeout_s + 5.0)
            if thread.is_alive():
                raise RuntimeError(f"MQTT {thread.name} thread did not stop for the reconnect")
        self._sender.process_acks(flush=True)
        self._window.take_all_back()
        earlier, self._session = self._session, session
        session.take_over(earlier)
        self._sender = self._new_sender(config)
        self.config = config
        self._commands.reconfigure(config)
        shared.client = client
        shared.set_state(State.CONNECTING)
        log.info("MQTT reconnecting with new settings to %s; %d detections spooled",
                 ", ".join(str(b) for b in config.brokers), self._spool.stats().backlog)
        for index, (name, target) in enumerate((("mqtt-network", session.run), ("mqtt-sender", self._sender.run))):
            self._threads[index] = threading.Thread(target=target, name=name, daemon=True)
            self._threads[index].start()

    def _new_sender(self, config: MqttConfig) -> Sender:
        return Sender(config, self._shared, self._spool, self._window, self._clock, self._health.publish,
                      self.retry_held)

    def __enter__(self) -> "MqttPublisher":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def boot_id(self) -> str:
        """Every detections message of this publisher carries it, with its camera's ``message_seq``."""
        return self._numbers.boot_id

    @property
    def state(self) -> State:
        return self._shared.state

    def wait_connected(self, timeout: float) -> bool:
        """True once connected and the broker has acknowledged the subscription to this device's commands (a
        command published from then on is delivered); False if that did not happen within ``timeout``."""
        deadline = time.monotonic() + timeout
        return (self._shared.connected_evt.wait(timeout)
                and self._shared.commands_live.wait(max(0.0, deadline - time.monotonic())))

    def wait_idle(self, timeout: float) -> bool:
        """True once the spool is empty and nothing is in flight (all detections acknowledged)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._window.pending() and self._spool.stats().backlog == 0:
                return True
            self._shared.wake.set()
            time.sleep(0.02)
        return False

    def stats(self) -> PublisherStats:
        s = self._shared
        with s.lock:
            return PublisherStats(s.state, s.connects, s.connect_failures, s.published, s.acked, s.rejected,
                                  len(self._window.inflight), s.suppressed, s.last_error, s.broker,
                                  tuple(s.backoff_delays), self._spool.stats(), self._authorizer.refusals(),
                                  *self._held_stats())

    def _held_stats(self) -> tuple[int, int, str | None, dict[tuple[str, str, str], int]]:
        held, held_bytes, error, since = self._holdback.state()
        return held, held_bytes, error if since is not None else None, self._holdback.dropped_counts()

    def retry_held(self) -> None:
        """Try the spool again for results held in memory (the sender does it each second, in case no result
        comes)."""
        self._holdback.retry()

    def _gap_record(self, camera_id: str, first: int, last: int, reason: str) -> SpoolRecord:
        payload = gap_payload(self.config.device_id, camera_id, self._numbers.boot_id, first, last, reason,
                              self._clock.time())
        return SpoolRecord(self.topics.detections(camera_id), wire.encode(payload), self.config.qos.detections)

    def _require_running(self) -> None:
        if not self._started:
            raise NotStartedError("MqttPublisher.start() must be called before publishing")
        if self._shared.closing or self._shared.state is State.STOPPED:
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
        records: list[Held] = []
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
            number = self._numbers.next(msg.camera_id, msg.seq)
            message_id = msg.message_id or wire.new_message_id()
            payload = wire.encode(wire.detections_payload(msg, self.config.device_id, message_id, number))
            records.append(Held(SpoolRecord(topic, payload, qos), msg.camera_id, "detections", number.message_seq))
            results.append(PublishResult.SPOOLED)
        suppressed = sum(r is PublishResult.SUPPRESSED for r in results)
        if suppressed:
            with self._shared.lock:
                self._shared.suppressed += suppressed
        if records:
            kept = self._holdback.append(records)
            self._shared.nudge()
            if kept < len(records):
                # The spool keeps a prefix of a batch under drop_newest/block; mark the refused tail.
                refused = len(records) - kept
                for i in range(len(results) - 1, -1, -1):
                    if refused and results[i] is PublishResult.SPOOLED:
                        results[i] = PublishResult.DROPPED
                        refused -= 1
        return results

    def publish_events(self, events: Sequence[Event]) -> int:
        """Spool one frame's analytics events in one transaction, behind that frame's detections (the spool is
        sent in id order, so a camera's events reach the broker in seq order). Returns how many were kept."""
        self._require_running()
        if not events:
            return 0
        qos, device, boot = self.config.qos.events, self.config.device_id, self._numbers.boot_id
        records = [Held(SpoolRecord(self.topics.camera_topic(e.camera_id, "events"),
                                    wire.encode(wire.event_payload(e, device, boot)), qos), e.camera_id, "events")
                   for e in events]
        kept = self._holdback.append(records)
        self._shared.nudge()
        return kept

    def publish_clip(self, clip: ClipMessage) -> int:
        """``<camera>/clips``: an event's clip is written (or failed), spooled like the events (QoS qos.events)."""
        self._require_running()
        record = SpoolRecord(self.topics.camera_topic(clip.camera_id, "clips"),
                             wire.encode(wire.clip_payload(clip, self.config.device_id, self._numbers.boot_id)),
                             self.config.qos.events)
        kept = self._holdback.append([Held(record, clip.camera_id, "events")])  # a clip notice counts as an event
        self._shared.nudge()
        return kept

    def publish_counts(self, camera_id: str, last_event_seq: int, active_tracks: int,
                       counts: Mapping[str, Mapping[str, Mapping[str, int]]]) -> None:
        """Retained ``<camera>/counts``; remembered and republished after every reconnect (not spooled: the
        latest counts supersede the earlier ones)."""
        self._require_running()
        payload = wire.encode(wire.counts_payload(self.config.device_id, camera_id, self._numbers.boot_id,
                                        self._clock.time(), last_event_seq, active_tracks, counts))
        self._publish_retained(self.topics.camera_topic(camera_id, "counts"), payload)

    def publish_snapshot(self, camera_id: str, jpeg: bytes, user_properties: Sequence[tuple[str, str]] = ()) -> None:
        """Retained ``<camera>/snapshot``: the JPEG bytes themselves (docs/mqtt.md); remembered like counts.
        Under MQTT 5 ``user_properties`` (``messages.snapshot_properties``) tie it to its events."""
        self._require_running()
        self._publish_retained(self.topics.camera_topic(camera_id, "snapshot"), jpeg, user_properties)

    def _publish_retained(self, topic: str, payload: bytes, user_properties: Sequence[tuple[str, str]] = ()) -> None:
        self._session.remember_retained(topic, payload, user_properties)
        self._session.publish_if_connected(topic, payload, qos=self.config.qos.status, retain=True,
                                           user_properties=user_properties)

    def publish_camera_status(self, status: CameraStatus) -> None:
        """Retained camera status; remembered and republished after every reconnect."""
        self._require_running()
        topic = self.topics.camera_status(status.camera_id)
        payload = wire.encode(wire.camera_status_payload(status, self.config.device_id, self._clock.time()))
        self._session.remember_retained(topic, payload)
        self._session.publish_if_connected(topic, payload, qos=self.config.qos.status, retain=True)

    def set_publish_modes(self, publish: PublishConfig, cameras: Mapping[str, PublishConfig]) -> None:
        """``mqtt.publish`` and ``mqtt.cameras`` from now on (a reload): a camera whose mode changed goes through a
        gate of its new mode from its next frame; the others keep their gates and what those remember."""
        old = self.config
        self.config = old.model_copy(update={"publish": publish, "cameras": dict(cameras)})
        for camera_id in list(self._gates):
            if self.config.publish_config(camera_id) != old.publish_config(camera_id):
                self._gates.pop(camera_id, None)

    def clear_camera(self, camera_id: str) -> None:
        """A camera that no longer runs: its retained status, counts and snapshot are cleared at the broker (an
        empty retained message), now if connected and again after each reconnect."""
        self._require_running()
        for topic in (self.topics.camera_status(camera_id), self.topics.camera_topic(camera_id, "counts"),
                      self.topics.camera_topic(camera_id, "snapshot")):
            self._session.remember_retained(topic, b"")
            self._session.publish_if_connected(topic, b"", qos=self.config.qos.status, retain=True)

    def publish_device_event(self, suffix: str, payload: Mapping[str, Any], qos: Optional[int] = None,
                             retain: bool = False) -> None:
        """Publish ``payload`` (JSON) on ``<prefix>/<device>/<suffix>`` now if connected (QoS default: the status
        QoS). Not spooled: a retained event is remembered and republished after every reconnect (the latest
        per topic); an unretained one published while disconnected is lost."""
        self._require_running()
        topic = self.topics.device_topic(suffix)
        data = wire.encode(payload)
        qos = self.config.qos.status if qos is None else qos
        if retain:
            self._session.remember_retained(topic, data)
        self._session.publish_if_connected(topic, data, qos=qos, retain=retain)

    def set_health_provider(self, provider: Optional[HealthProvider]) -> None:
        """``provider()`` returns {"cameras": {id: {name: value}}, "system": {name: value}} for each health
        message (values: numbers, strings, booleans or null); the publisher adds its own MQTT and spool state."""
        self._health.provider = provider

    def on_command(self, name: str, handler: CommandHandler, *, read_only: bool | ReadOnly = False) -> None:
        """Run ``handler(command)`` for <prefix>/<device>/command/<name>; its returned mapping is the reply's
        result. Raise CommandError for a clean failure reply. Handlers run on one worker thread, in order.
        Unless ``read_only`` (True, or true of the command's args), a command runs only with a good signature
        (mqtt.commands; docs/mqtt.md, "Signed commands")."""
        self._commands.register(name, handler, read_only)

    def subscribe(self, topic: str, handler: MessageHandler) -> None:
        """Receive ``topic`` (exact; subscribed in every session, so a retained message comes again after each
        reconnect): ``handler(payload)`` runs on the network thread and must only hand the payload on."""
        self._session.subscribe(topic, handler)

    def commands(self) -> list[str]:
        """The names of the registered commands, sorted (docs/mqtt.md lists them)."""
        return self._commands.names()

    def publish_health_now(self) -> None:
        """Publish a health message immediately (it is also published every health_interval_s)."""
        self._require_running()
        self._health.publish()

    def health_payload(self) -> dict[str, Any]:
        return self._health.payload()
