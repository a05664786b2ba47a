"""The MQTT session: one paho client, connected and reconnected with backoff by the network thread.

A refused connection is never "connected", and only a session that held ``_STABLE_SESSION_S`` resets the backoff.
Which broker comes next is ``BrokerRotation`` (docs/fleet.md, "Broker failover"); what a session does at CONNACK,
at its end and at stop: docs/mqtt.md, "Inside the publisher"."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from appliance.backoff import Backoff
from appliance.mqtt.connection import aim, build_client, describe_connect_error, describe_early_close, describe_refusal
from appliance.mqtt.messages import device_status_payload, encode
from appliance.mqtt.rotation import BrokerRotation
from appliance.mqtt.shared import State

if TYPE_CHECKING:
    from appliance.mqtt.commands import CommandRunner
    from appliance.mqtt.config import Broker, MqttConfig
    from appliance.mqtt.shared import Clock, Shared
    from appliance.mqtt.spool import Spool
    from appliance.mqtt.topics import Topics
    from appliance.mqtt.window import InflightWindow

log = logging.getLogger(__name__)

MessageHandler = Callable[[bytes], None]  # an extra subscription's payload, on the network thread

_STABLE_SESSION_S = 10.0


class Session:
    """Threading contract.

    - network thread (``run``): the only caller of client.reconnect() and client.loop(), so paho's callbacks run on
      it too; the CONNACK, disconnect and socket-error fields are its alone.
    - caller threads: ``subscribe`` (its handler then runs on the network thread and must only hand the payload
      on), ``remember_retained``, ``publish_if_connected``; the stopping thread: ``publish_offline``, ``halt``.
    - ``shared.gate`` is held while reconnecting and while the state turns CONNECTED, so the sender publishes only
      into a session whose CONNACK has been fully handled (paho has re-queued the previous session's unacknowledged
      messages by then, so they go out first); ``shared.lock`` guards ``_retained``, ``_subscriptions``,
      ``_subscribed`` and the counters.
    """

    def __init__(self, config: MqttConfig, topics: Topics, clock: Clock, rng: random.Random,
                 versions: Mapping[str, str], shared: Shared, spool: Spool, window: InflightWindow,
                 commands: CommandRunner, group: Optional[str] = None) -> None:
        self._config = config
        self._topics = topics
        self._clock = clock
        self._versions = versions
        self._shared = shared
        self._spool = spool
        self._window = window
        self._commands = commands
        self._group = group  # the fleet group named in the device status (ota.group)
        self._subscriptions: dict[str, MessageHandler] = {}  # exact topic -> handler; guarded by shared.lock
        # True once this session has sent its SUBSCRIBEs (guarded by shared.lock): a later subscribe() sends its own
        self._subscribed = False
        self._halt = threading.Event()         # network thread: disconnect and exit
        # status topic -> (payload, MQTT 5 user properties), republished on reconnect
        self._retained: dict[str, tuple[bytes, tuple[tuple[str, str], ...]]] = {}
        self._connack: Optional[tuple[Any, Any]] = None
        self._disconnect_reason: Optional[str] = None
        self._socket_error: Optional[str] = None  # paho reports socket/TLS read errors only through on_log
        self._commands_mid: Optional[int] = None  # the SUBSCRIBE to the command topics in this session
        self._brokers = config.brokers
        self._rotation = BrokerRotation(self._brokers, Backoff(config.backoff, rng))  # network thread only
        shared.broker = str(self._brokers[0])

    def create_client(self) -> paho.Client:
        """A configured, unconnected client wired to this session. Raises MqttConfigError (TLS, password)."""
        will = encode(device_status_payload(self._config.device_id, "offline", None, self._versions,
                                            reason="connection lost", group=self._group))
        client = build_client(self._config, self._topics.device_status, will, self._config.qos.status)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        client.on_message = self._on_message
        client.on_log = self._on_log
        client.on_subscribe = self._on_subscribe
        return client

    # -- caller threads ------------------------------------------------------------------------------------

    def subscribe(self, topic: str, handler: MessageHandler) -> None:
        """Subscribe to ``topic`` (exact, no wildcards) in this and every later session; its messages, retained
        ones included, go to ``handler`` on the network thread."""
        with self._shared.lock:
            self._subscriptions[topic] = handler
            subscribed, client = self._subscribed, self._shared.client
        if subscribed and client is not None:  # else the session subscribes it when it comes up
            client.subscribe(topic, qos=self._config.qos.commands)

    def remember_retained(self, topic: str, payload: bytes, user_properties: Sequence[tuple[str, str]] = ()) -> None:
        with self._shared.lock:
            self._retained[topic] = (payload, tuple(user_properties))

    def publish_if_connected(self, topic: str, payload: bytes, qos: int, retain: bool,
                             user_properties: Sequence[tuple[str, str]] = ()) -> None:
        """Publish now if connected; otherwise nothing (not spooled). ``user_properties`` go with it under
        MQTT 5 and are left out under 3.1.1, which has none."""
        client = self._shared.client
        if self._shared.state is State.CONNECTED and client is not None:
            client.publish(topic, payload, qos=qos, retain=retain, properties=self._properties(user_properties))

    def _properties(self, user_properties: Sequence[tuple[str, str]]) -> Optional[Properties]:
        if self._config.protocol != "5" or not user_properties:
            return None
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = list(user_properties)
        return props

    def publish_offline(self, deadline: float) -> None:
        """Stopping thread: the clean 'offline' status, waited for until ``deadline`` (monotonic)."""
        client = self._shared.client
        assert client is not None
        payload = encode(device_status_payload(self._config.device_id, "offline", self._clock.time(),
                                               self._versions, reason="stopped", group=self._group))
        info = client.publish(self._topics.device_status, payload, qos=self._config.qos.status, retain=True)
        try:
            info.wait_for_publish(max(0.1, deadline - time.monotonic()))
        except (RuntimeError, ValueError):
            pass  # not queued: the connection just dropped; the broker will send the last will instead

    def take_over(self, earlier: "Session") -> None:
        """What ``earlier`` (a session of this publisher, halted) republishes and subscribes in each session: the
        retained messages remembered and the extra subscriptions; this session's own newer values win."""
        with self._shared.lock:
            self._retained = {**earlier._retained, **self._retained}
            self._subscriptions = {**earlier._subscriptions, **self._subscriptions}

    def halt(self) -> None:
        self._halt.set()

    # -- paho callbacks (network thread, inside client.loop()) ---------------------------------------------

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._connack = (reason, properties)

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._disconnect_reason = str(reason)

    def _on_publish(self, client: paho.Client, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
        self._window.on_puback(mid, reason)
        self._shared.nudge()

    def _on_subscribe(self, client: paho.Client, userdata: Any, mid: int, reasons: Any, properties: Any) -> None:
        if mid == self._commands_mid:
            self._shared.commands_live.set()

    def _on_log(self, client: paho.Client, userdata: Any, level: int, buf: str) -> None:
        # Keep the first error of a session: it is the cause; later ones are consequences.
        if level == paho.MQTT_LOG_ERR and self._socket_error is None:
            self._socket_error = buf

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self._shared.lock:
            handler = self._subscriptions.get(msg.topic)
        if handler is None:
            self._commands.dispatch(msg)
            return
        try:
            handler(bytes(msg.payload))
        except Exception:  # never let a handler end the network thread's loop
            log.exception("MQTT: the handler of %s failed", msg.topic)

    # -- network thread ------------------------------------------------------------------------------------

    def run(self) -> None:
        rotation, shared = self._rotation, self._shared
        while not self._halt.is_set():
            broker = rotation.current
            began = time.monotonic()
            was_connected, reason = self._run_session(broker)
            if self._halt.is_set():
                break
            shared.set_state(State.CONNECTING)
            short = time.monotonic() - began < _STABLE_SESSION_S
            # Only a session that held resets the backoff; a broker that drops us at once gets backoff.
            following, delay = rotation.ended(held=was_connected and not short)
            if was_connected:
                client = shared.client
                assert client is not None
                self._window.after_session(client, short, reason, new_broker=following != broker)
            else:
                with shared.lock:
                    shared.connect_failures += 1
            if delay:
                shared.backoff_delays.append(delay)
            with shared.lock:
                shared.last_error = reason
                shared.broker = str(following)
            self._log_end(broker, following, was_connected, short, reason, delay, rotation.backoff.failures)
            self._halt.wait(delay)
        shared.set_state(State.STOPPED if shared.closing else shared.state)

    def _log_end(self, broker: Broker, following: Broker, was_connected: bool, short: bool, reason: str,
                 delay: float, failures: int) -> None:
        backlog = self._spool.stats().backlog
        if following == broker:
            then = f"reconnecting in {delay:.1f} s" if was_connected else f"retry {failures} in {delay:.1f} s"
        elif delay:
            then = f"trying the next broker, {following}, in {delay:.1f} s (every broker failed; retry {failures})"
        else:
            then = f"trying the next broker, {following}, now"
        if was_connected:
            hint = ""
            if short:
                hint = (f" (dropped soon after connecting: if it repeats, check the broker log and its ACL "
                        f"for {self._topics.base}/#)")
            log.warning("MQTT connection to %s lost (%s)%s; detections spool on disk (%d queued); %s", broker,
                        reason, hint, backlog, then)
        else:
            log.warning("MQTT connect failed: %s; %s; %d detections spooled", reason, then, backlog)

    def _run_session(self, broker: Broker) -> tuple[bool, str]:
        """One connection attempt to ``broker`` and, if it succeeds, the session until it ends.
        (was_connected, reason)."""
        client = self._shared.client
        assert client is not None
        with self._shared.gate:
            self._shared.set_state(State.CONNECTING)
            with self._shared.lock:
                self._subscribed = False
            self._connack = None
            self._disconnect_reason = None
            self._socket_error = None
            try:
                if len(self._brokers) > 1:
                    aim(client, self._config, broker)
                client.reconnect()
            except Exception as exc:  # socket, TLS and DNS errors all mean "not connected; retry"
                return False, describe_connect_error(exc, self._config, broker)
        deadline = time.monotonic() + self._config.connect_timeout_s
        connected = False
        while True:
            if self._halt.is_set():
                self._disconnect(client)
                return connected, "stopping"
            rc = client.loop(timeout=0.2 if connected else 0.05)
            if not connected and self._connack is not None:
                reason, properties = self._connack
                if reason.is_failure:
                    return False, describe_refusal(reason, self._config, broker)
                connected = True
                self._session_up(client, properties, broker)
            if rc != paho.MQTT_ERR_SUCCESS:
                detail = self._socket_error or self._disconnect_reason or paho.error_string(rc)
                if connected:
                    return True, detail
                return False, describe_early_close(detail, self._config, broker)
            if not connected and time.monotonic() > deadline:
                return False, f"no CONNACK from {broker} within {self._config.connect_timeout_s} s"

    def _command_options(self) -> dict[str, Any]:
        """MQTT 5: Retain As Published, so a retained command is seen as retained (and ignored) even when it was
        published while the appliance was subscribed; 3.1.1 clears the flag then (docs/mqtt.md, "Commands")."""
        if self._config.protocol != "5":
            return {"qos": self._config.qos.commands}
        return {"options": SubscribeOptions(qos=self._config.qos.commands, retainAsPublished=True)}

    def _session_up(self, client: paho.Client, properties: Any, broker: Broker) -> None:
        # Runs after paho has re-queued the previous session's unacknowledged messages, so everything the
        # sender publishes from here on goes out after them.
        cfg, shared = self._config, self._shared
        receive_max = getattr(properties, "ReceiveMaximum", None) if properties is not None else None
        window = self._window.resize(cfg.inflight_window, receive_max)
        qos = cfg.qos
        _, self._commands_mid = client.subscribe(self._topics.command_filter, **self._command_options())
        with shared.lock:  # together with subscribe(): each topic is subscribed by exactly one of the two
            extra = list(self._subscriptions)
            self._subscribed = True
        for topic in extra:
            client.subscribe(topic, qos=qos.commands)
        online = encode(device_status_payload(cfg.device_id, "online", self._clock.time(), self._versions,
                                              group=self._group))
        self._window.expect_status()
        info = client.publish(self._topics.device_status, online, qos=qos.status, retain=True)
        self._window.status_sent(info.mid, qos.status)
        with shared.lock:
            retained = list(self._retained.items())
            shared.connects += 1
            shared.last_error = None
        for topic, (payload, user_properties) in retained:
            client.publish(topic, payload, qos=qos.status, retain=True, properties=self._properties(user_properties))
        backlog = self._spool.stats().backlog
        place = f" (broker {self._brokers.index(broker) + 1} of {len(self._brokers)})" if len(self._brokers) > 1 else ""
        log.info("MQTT connected to %s%s as %s (MQTT %s, window %d); %d spooled detections to send",
                 broker, place, cfg.effective_client_id, cfg.protocol, window, backlog)
        with shared.gate:
            shared.set_state(State.CONNECTED)
        shared.wake.set()

    def _disconnect(self, client: paho.Client) -> None:
        if client.disconnect() != paho.MQTT_ERR_SUCCESS:
            return
        end = time.monotonic() + 1.0
        while time.monotonic() < end and client.want_write():
            if client.loop(timeout=0.05) != paho.MQTT_ERR_SUCCESS:
                break
