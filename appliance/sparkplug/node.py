"""The Sparkplug B edge node: its own MQTT connection, births, data by exception, death by last will; with
``primary_host_id`` set, births only while that host's STATE says online.

One thread, ``sparkplug-node``, owns the paho client: it connects, loops, samples and publishes, so paho's
callbacks run on it too and nothing here needs a lock. The connection is its own because the NDEATH must be the
last will of the connection that published the NBIRTH (docs/sparkplug.md, "Connection")."""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from appliance.backoff import Backoff
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.connection import aim, build_client, describe_connect_error, describe_early_close, describe_refusal
from appliance.mqtt.rotation import BrokerRotation
from appliance.sparkplug.payload import PayloadError, decode_payload
from appliance.sparkplug.primaryhost import PrimaryHost
from appliance.sparkplug.reports import REBIRTH, NodeReports, Outgoing, Readings, SparkplugTopics, death_payload
from appliance.sparkplug.sequence import BdSeqStore

log = logging.getLogger(__name__)

BDSEQ_FILE = "sparkplug-bdseq"
_STABLE_SESSION_S = 10.0  # a session that held this long resets the backoff
_DEATH_QOS = 1            # the spec's QoS for NDEATH (the will); births and data are QoS 0


def wall_ms() -> int:
    return int(time.time() * 1000)


class EdgeNode:
    """``readings`` is called on the node's thread once per ``mqtt.sparkplug.interval_s`` and at each birth;
    an exception from it skips that sample (logged)."""

    def __init__(self, mqtt: MqttConfig, readings: Callable[[], Readings], state_dir: Path, *,
                 clock_ms: Callable[[], int] = wall_ms, rng: Optional[random.Random] = None) -> None:
        if mqtt.sparkplug is None:
            raise ValueError("mqtt.sparkplug is not configured")
        self._sparkplug = mqtt.sparkplug
        self._config = mqtt.model_copy(update={"client_id": f"{mqtt.effective_client_id}-sparkplug",
                                               "clean_session": True})
        self.topics = SparkplugTopics(self._sparkplug.group_id, self._sparkplug.node_id(mqtt.device_id))
        self._readings = readings
        self._store = BdSeqStore(state_dir / BDSEQ_FILE)
        self._clock_ms = clock_ms
        self._rng = rng or random.Random()
        self._client: Optional[paho.Client] = None
        self._thread: Optional[threading.Thread] = None
        self._halt = threading.Event()
        self._up = threading.Event()           # set while a session is up (births sent)
        self.bd_seq: Optional[int] = None      # the current connection's
        self.connects = 0
        self.last_error: Optional[str] = None
        # network thread only
        self._reports: Optional[NodeReports] = None
        self._connack: Optional[tuple[Any, Any]] = None
        self._disconnect_reason: Optional[str] = None
        self._broker = self._config.brokers[0]  # the one connected to or being tried (mqtt.hosts: it moves)
        self._rebirth = False
        host_id = self._sparkplug.primary_host_id
        self._host = PrimaryHost(host_id) if host_id else None
        self._host_online: Optional[bool] = None  # the primary host's state on this broker; None: not known yet

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    def wait_connected(self, timeout_s: float) -> bool:
        return self._up.wait(timeout_s)

    def start(self) -> EdgeNode:
        """Build the client (raises MqttConfigError for unusable TLS material or password file) and start the
        node's thread; it connects in the background."""
        client = build_client(self._config, self.topics.node("NDEATH"), b"", _DEATH_QOS)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        self._client = client
        self._thread = threading.Thread(target=self._run, name="sparkplug-node", daemon=True)
        self._thread.start()
        log.info("sparkplug: edge node %s/%s on %s", self.topics.group_id, self.topics.edge_node_id,
                 ", ".join(str(b) for b in self._config.brokers))
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Publish NDEATH if connected, disconnect, join the thread."""
        if self._thread is None:
            return
        self._halt.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("sparkplug: the node's thread did not stop within %.1f s", timeout_s)
        self._thread = None

    # -- paho callbacks (the node's thread, inside client.loop()) ------------------------------------------

    def _on_connect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._connack = (reason, properties)

    def _on_disconnect(self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any) -> None:
        self._disconnect_reason = str(reason)

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        if self._host is not None and msg.topic == self._host.topic:
            state = self._host.judge(str(self._broker), msg.topic, msg.payload)
            if state is not None:
                self._host_online = state
            return
        device = None if msg.topic == self.topics.node("NCMD") else msg.topic.rsplit("/", 1)[-1]
        try:
            payload = decode_payload(msg.payload)
        except PayloadError as exc:
            log.warning("sparkplug: ignoring a malformed command on %s (%d bytes): %s", msg.topic, len(msg.payload),
                        exc)
            return
        for metric in payload.metrics:
            name = metric.name or self._aliased(device, metric.alias)
            if device is None and name == REBIRTH and metric.value is True:
                log.info("sparkplug: rebirth requested")
                self._rebirth = True
            elif not (device is None and name == REBIRTH):
                log.info("sparkplug: ignoring the command to %s %r: only %r is writable",
                         f"device {device}" if device else "the node", name, REBIRTH)

    def _aliased(self, device: Optional[str], alias: Optional[int]) -> str:
        """The name of the metric a command names by alias (a host sends commands by alias once it has one)."""
        found = self._reports.aliases.metric(alias) if self._reports is not None and alias is not None else None
        if found is None or found[0] != device:
            return f"<unknown alias {alias}>"
        return found[1]

    # -- the node's thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        # The JSON session's rule for mqtt.hosts (appliance/mqtt/rotation.py): the next broker at once, the backoff
        # only after every broker of the list failed in a row.
        rotation = BrokerRotation(self._config.brokers, Backoff(self._config.backoff, self._rng))
        while not self._halt.is_set():
            began = time.monotonic()
            was_up, reason = self._session()
            self._up.clear()
            if self._halt.is_set():
                break
            self.last_error = reason
            following, delay = rotation.ended(held=was_up and time.monotonic() - began >= _STABLE_SESSION_S)
            ended = "session ended" if was_up else "no session"
            if following != self._broker:
                self._broker = following
                aim(self._client, self._config, following)  # type: ignore[arg-type]
                if not delay:
                    log.warning("sparkplug: %s: %s; trying the next broker, %s, now", ended, reason, following)
                    continue
            log.warning("sparkplug: %s: %s; connecting again in %.1f s", ended, reason, delay)
            self._halt.wait(delay)

    def _session(self) -> tuple[bool, str]:
        """One CONNECT with a new bdSeq and, if accepted, the session until it ends. (was_up, reason)."""
        client = self._client
        assert client is not None
        bd_seq = self.bd_seq = self._store.next()
        client.will_set(self.topics.node("NDEATH"), death_payload(bd_seq, self._clock_ms()), qos=_DEATH_QOS,
                        retain=False)
        self._connack, self._disconnect_reason, self._rebirth = None, None, False
        self._reports, self._host_online = None, None
        try:
            client.reconnect()
        except Exception as exc:  # socket, TLS and DNS errors all mean "not connected; retry"
            return False, describe_connect_error(exc, self._config, self._broker)
        deadline = time.monotonic() + self._config.connect_timeout_s
        while self._reports is None:  # until CONNACK
            if self._halt.is_set():
                client.disconnect()
                return False, "stopping"
            rc = client.loop(timeout=0.05)
            if self._connack is not None:
                reason, _properties = self._connack
                if reason.is_failure:
                    return False, describe_refusal(reason, self._config, self._broker)
                self._session_open(client, bd_seq)
            elif rc != paho.MQTT_ERR_SUCCESS:
                detail = self._disconnect_reason or paho.error_string(rc)
                return False, describe_early_close(detail, self._config, self._broker)
            elif time.monotonic() > deadline:
                client.disconnect()
                return False, f"no CONNACK from {self._broker} within {self._config.connect_timeout_s} s"
        return self._connected(client, bd_seq)

    def _connected(self, client: paho.Client, bd_seq: int) -> tuple[bool, str]:
        """The session after CONNACK: births once the primary host (if any) is online, then data by exception."""
        up = False
        next_sample = 0.0
        while True:
            if self._halt.is_set():
                self._leave(client, bd_seq, up)
                return up, "stopping"
            rc = client.loop(timeout=0.02 if up else 0.05)
            if rc != paho.MQTT_ERR_SUCCESS:
                return up, self._disconnect_reason or paho.error_string(rc)
            if self._host is not None and self._host_online is False and (up or len(self._config.brokers) > 1):
                self._leave(client, bd_seq, up)
                return up, f"the primary host {self._host.host_id} is offline on {self._broker}"
            if not up:
                if self._host is None or self._host_online:
                    up = True
                    self._born(client, bd_seq)
                    next_sample = time.monotonic() + self._sparkplug.interval_s
            elif self._rebirth:
                self._rebirth = False
                self._publish(client, self._births())
            elif time.monotonic() >= next_sample:
                next_sample += self._sparkplug.interval_s
                next_sample = max(next_sample, time.monotonic())  # after a slow sample, do not burst to catch up
                self._publish_changes(client)

    def _session_open(self, client: paho.Client, bd_seq: int) -> None:
        topics = [(self.topics.node("NCMD"), 1), (self.topics.device("DCMD", "+"), 1)]
        if self._host is not None:
            topics.append((self._host.topic, 1))
            log.info("sparkplug: connected to %s; waiting for the primary host %s to be online (%s)", self._broker,
                     self._host.host_id, self._host.topic)
        client.subscribe(topics)
        self._reports = NodeReports(self.topics, bd_seq, self._clock_ms)

    def _born(self, client: paho.Client, bd_seq: int) -> None:
        self._rebirth = False  # a request that came while waiting for the host: these births answer it
        self._publish(client, self._births())
        self.connects += 1
        self.last_error = None
        self._up.set()
        log.info("sparkplug: online as %s (bdSeq %d)", self.topics.node("NBIRTH"), bd_seq)

    def _births(self) -> list[Outgoing]:
        assert self._reports is not None
        return self._reports.births(self._sample() or Readings())

    def _publish_changes(self, client: paho.Client) -> None:
        readings = self._sample()
        if readings is None:
            return
        assert self._reports is not None
        try:
            out = self._reports.changes(readings)
        except ValueError as exc:  # a reading its datatype cannot hold: a bug in the readings, not fatal
            log.error("sparkplug: readings not published: %s", exc)
            return
        self._publish(client, out)

    def _sample(self) -> Optional[Readings]:
        try:
            return self._readings()
        except Exception as exc:  # the appliance is starting or stopping: the next sample will do
            log.warning("sparkplug: no readings this time: %s", exc)
            return None

    @staticmethod
    def _publish(client: paho.Client, messages: list[Outgoing]) -> None:
        for message in messages:
            client.publish(message.topic, message.payload, qos=0, retain=False)

    def _leave(self, client: paho.Client, bd_seq: int, born: bool) -> None:
        if born:
            self._die(client, bd_seq)
        else:
            client.disconnect()

    def _die(self, client: paho.Client, bd_seq: int) -> None:
        """An intentional end: NDEATH ourselves, then DISCONNECT. With MQTT 3.1.1 the broker drops the will on
        DISCONNECT; with MQTT 5 the DISCONNECT says "with will message", as the spec asks, so the will follows."""
        info = client.publish(self.topics.node("NDEATH"), death_payload(bd_seq, self._clock_ms()),
                              qos=_DEATH_QOS, retain=False)
        end = time.monotonic() + 2.0
        while time.monotonic() < end and not info.is_published():
            if client.loop(timeout=0.05) != paho.MQTT_ERR_SUCCESS:
                return
        if self._config.protocol == "5":
            client.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, "Disconnect with will message"))
        else:
            client.disconnect()
        end = time.monotonic() + 1.0
        while time.monotonic() < end and client.want_write():
            if client.loop(timeout=0.05) != paho.MQTT_ERR_SUCCESS:
                break
