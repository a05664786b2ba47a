"""What the MQTT publisher's threads share: the connection state, the counters, the client and the locks.

One instance per MqttPublisher, handed to the session, the window, the sender and the commands; it decides nothing
itself. Also the public value types the façade returns (State, PublishResult, PublisherStats) and the Clock it
reads time from. Who may touch what: :class:`Shared`."""

from __future__ import annotations

import collections
import enum
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol

if TYPE_CHECKING:
    import paho.mqtt.client as paho

    from appliance.mqtt.spool import SpoolStats


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
    broker: str          # host:port of the broker connected to, or being tried (mqtt.hosts: it moves on failure)
    backoff_delays: tuple[float, ...]  # the most recent reconnect delays, newest last
    spool: SpoolStats
    commands_refused: Mapping[str, int] = field(default_factory=dict)  # signed-command refusals by code
    held: int = 0  # results held in memory because the spool cannot be written (mqtt.holdback)
    held_bytes: int = 0
    write_error: Optional[str] = None  # the spool's write error while results are held
    results_dropped: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # (camera, kind, reason)

    def held_readings(self) -> dict[str, Any]:
        """The health message's part of the spool for a full disk (mqtt.holdback): held and dropped results."""
        dropped = [{"camera_id": c, "kind": k, "reason": r, "count": n}
                   for (c, k, r), n in sorted(self.results_dropped.items())]
        readings: dict[str, Any] = {"held": self.held, "held_bytes": self.held_bytes, "results_dropped": dropped}
        return {**readings, "write_error": self.write_error} if self.write_error else readings

    @property
    def spooling(self) -> bool:
        """True while detections wait on disk rather than flow straight through."""
        return self.state is not State.CONNECTED or self.spool.backlog > self.inflight


class Shared:
    """The state and counters every publisher thread reads or writes, with the locks that guard them.

    - ``lock`` guards ``state`` and the counters (connects, connect_failures, published, acked, rejected, suppressed,
      last_error, broker), the window's in-flight map and probe row and the session's retained map, so that
      ``MqttPublisher.stats()`` reads them in one consistent snapshot. Hold it briefly; never do I/O under it.
    - ``gate`` is held by the network thread while it reconnects and while the window is taken back from paho, and
      by the sender thread while it hands spooled detections to paho: the sender never publishes into a session
      that is half made or half taken apart.
    - ``wake`` wakes the sender thread; ``nudge()`` (producers, network thread) sets it only while the sender
      announced ``sender_idle``, because waking it per message costs more than the message on a 2-core box.
    - ``client`` is set by start() before any thread starts, and by reconnect() while the network and sender
      threads are stopped; ``closing`` is set once by stop().
    - ``backoff_delays`` is appended by the network thread only (a deque: readers take a tuple of it).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()          # state and counters (see the class docstring for the rest)
        self.gate = threading.Lock()          # sender publishing vs. network thread reconnecting
        self.wake = threading.Event()
        self.sender_idle = False              # True only while the sender waits; producers wake it only then
        self.connected_evt = threading.Event()
        self.commands_live = threading.Event()  # the broker acknowledged this session's command subscription
        self.client: Optional[paho.Client] = None
        self.state = State.NEW
        self.closing = False
        self.connects = self.connect_failures = self.published = self.acked = 0
        self.rejected = self.suppressed = 0
        self.last_error: Optional[str] = None
        self.broker = ""                      # host:port the session is on or trying (network thread writes)
        self.backoff_delays: collections.deque[float] = collections.deque(maxlen=16)

    def set_state(self, state: State) -> None:
        with self.lock:
            self.state = state
        if state is State.CONNECTED:
            self.connected_evt.set()
        else:
            self.connected_evt.clear()
            self.commands_live.clear()

    def nudge(self) -> None:
        if self.sender_idle:
            self.wake.set()
