"""Commands: <prefix>/<device>/command/<name> in, one reply out per command, handlers off the network thread.

Handlers run one at a time, in arrival order, on the commands thread. A command that is not read-only runs only
once the authorizer accepts its signature (authz.py); a repeat gets the first reply again without running twice,
known by its nonce when signed, else by (command name, request_id), so no message can answer for another by
borrowing its request_id (docs/mqtt.md, "Commands")."""

from __future__ import annotations

import collections
import json
import logging
import queue
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, TypeVar

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from appliance.mqtt.errors import CommandError, CommandRefused
from appliance.mqtt.messages import Command, command_reply_payload, encode
from appliance.mqtt.topics import check_id

if TYPE_CHECKING:
    import paho.mqtt.client as paho

    from appliance.mqtt.authz import CommandAuthorizer
    from appliance.mqtt.config import MqttConfig
    from appliance.mqtt.shared import Clock, Shared
    from appliance.mqtt.topics import Topics

log = logging.getLogger(__name__)

CommandHandler = Callable[[Command], Optional[Mapping[str, Any]]]
# True for a command (or, given its args, a use of one) that changes nothing: it needs no signature.
ReadOnly = Callable[[Mapping[str, Any]], bool]
_RECENT_REQUESTS = 256
# name, payload, response topic, correlation data, arrival (epoch seconds)
_Item = tuple[str, bytes, Optional[str], Optional[bytes], float]


class CommandRunner:
    """Threading contract.

    - caller thread, before start(): ``register``.
    - network thread: ``dispatch`` (paho's on_message); it only enqueues.
    - commands thread: ``run`` and the handlers it calls; ``_recent`` is its alone. ``close`` (the stopping thread)
      enqueues the sentinel that ends ``run``.
    - The client is read from ``shared.client`` (set by start() and a reconnect); paho's publish() only queues the
      packet, the network thread writes it (see connection.build_client).
    """

    def __init__(self, config: MqttConfig, topics: Topics, clock: Clock, shared: Shared,
                 authorizer: CommandAuthorizer) -> None:
        self._config = config
        self._authorizer = authorizer
        self._topics = topics
        self._clock = clock
        self._shared = shared
        self._handlers: dict[str, CommandHandler] = {}
        self._read_only: dict[str, ReadOnly] = {}
        self._queue: queue.Queue[Optional[_Item]] = queue.Queue()
        self._recent: _Replies[tuple[str, str]] = _Replies()  # (name, request_id) of unsigned commands
        self._by_nonce: _Replies[str] = _Replies()              # nonce of signed commands

    def register(self, name: str, handler: CommandHandler, read_only: bool | ReadOnly = False) -> None:
        """``read_only``: True, or a predicate on the args; anything else must be signed (secure by default)."""
        check_id("command name", name)
        self._read_only[name] = read_only if callable(read_only) else _always(bool(read_only))
        self._handlers[name] = handler

    def reconfigure(self, config: MqttConfig) -> None:
        """The reply QoS and protocol of a publisher that reconnected with new settings (its next reply on)."""
        self._config = config

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def dispatch(self, msg: paho.MQTTMessage) -> None:
        """Network thread: queue a command message for the commands thread; other topics are ignored."""
        name = self._topics.command_name(msg.topic)
        if name is None:
            return
        if msg.retain:
            log.warning("MQTT: ignoring retained command on %s (a stale command must not run on reconnect); "
                        "publish commands without the retain flag", msg.topic)
            return
        if not msg.payload:  # how a retained message is cleared: never a command (one without arguments is {})
            log.warning("MQTT: ignoring an empty payload on %s (it clears a retained message; a command without "
                        "arguments is {})", msg.topic)
            return
        props = getattr(msg, "properties", None)
        response_topic = getattr(props, "ResponseTopic", None) if props is not None else None
        correlation = getattr(props, "CorrelationData", None) if props is not None else None
        self._queue.put((name, bytes(msg.payload), response_topic, correlation, self._clock.time()))

    def close(self) -> None:
        self._queue.put(None)

    def run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            name, payload, response_topic, correlation, received_at = item
            try:
                reply = self._run_command(name, payload, received_at)
                self._send_reply(reply, response_topic, correlation)
            except Exception:
                log.exception("MQTT command %r: could not reply", name)

    def _run_command(self, name: str, raw: bytes, received_at: float) -> bytes:
        """The reply to one command: checked, authorized, answered from memory when it is a repeat, else run."""
        request_id, args, auth, error = parse_command(raw)
        handler = self._handlers.get(name)
        if error is None and handler is None:
            known = ", ".join(sorted(self._handlers)) or "none"
            error = ("unknown_command", f"unknown command {name!r}; known: {known}")
        if error is not None or handler is None:
            return self._reply(name, request_id, None, error)
        nonce: Optional[str] = None
        if not self._read_only[name](args):
            try:
                accepted = self._authorizer.authorize(name, request_id, args, auth, received_at,
                                                      answered=self._by_nonce.__contains__)
            except CommandRefused as exc:
                return self._reply(name, request_id, None, (exc.code, exc.message))
            except Exception as exc:  # e.g. the nonce file cannot be written: fail closed, and say why
                log.exception("MQTT command %s request_id=%s: could not check its signature", name, request_id)
                return self._reply(name, request_id, None, (
                    "internal", f"could not check the signature ({type(exc).__name__}: {exc}); it did not run"))
            nonce = accepted.nonce
        first = self._by_nonce.get(nonce) if nonce is not None else \
            self._recent.get((name, request_id)) if request_id is not None else None
        if first is not None:
            log.info("MQTT command %s request_id=%s is a repeat; resending the first reply", name, request_id)
            return first
        reply = self._reply(name, request_id, *self._call(handler, name, request_id, args))
        if nonce is not None:
            self._by_nonce.keep(nonce, reply)
        elif request_id is not None:
            self._recent.keep((name, request_id), reply)
        return reply

    def _call(self, handler: CommandHandler, name: str, request_id: Optional[str],
              args: dict[str, Any]) -> tuple[Optional[Mapping[str, Any]], Optional[tuple[str, str]]]:
        """(result, error) of running the handler."""
        try:
            result = handler(Command(name, request_id, args, self._topics.command(name))) or {}
            if not isinstance(result, Mapping):
                raise TypeError(f"handler returned {type(result).__name__}, not a mapping")
            return result, None
        except CommandError as exc:
            return None, (exc.code, exc.message)
        except Exception as exc:
            log.exception("MQTT command %s request_id=%s failed", name, request_id)
            return None, ("internal", f"{type(exc).__name__}: {exc}")

    def _reply(self, name: str, request_id: Optional[str], result: Optional[Mapping[str, Any]],
               error: Optional[tuple[str, str]]) -> bytes:
        device_id = self._config.device_id
        try:
            return encode(command_reply_payload(device_id, name, request_id, self._clock.time(),
                                                result=result, error=error))
        except (TypeError, ValueError) as exc:
            return encode(command_reply_payload(device_id, name, request_id, self._clock.time(),
                                                error=("internal", f"result is not JSON: {exc}")))

    def _send_reply(self, reply: bytes, response_topic: Optional[str], correlation: Optional[bytes]) -> None:
        client = self._shared.client
        if client is None:
            return
        props = None
        if self._config.protocol == "5" and correlation is not None:
            props = Properties(PacketTypes.PUBLISH)
            props.CorrelationData = correlation
        client.publish(response_topic or self._topics.reply, reply, qos=self._config.qos.replies, properties=props)


_K = TypeVar("_K")


class _Replies(collections.OrderedDict[_K, bytes]):
    """The first replies to the last _RECENT_REQUESTS commands of one kind, oldest first."""

    def keep(self, key: _K, reply: bytes) -> None:
        self[key] = reply
        while len(self) > _RECENT_REQUESTS:
            self.popitem(last=False)


def _always(flag: bool) -> ReadOnly:
    return lambda _args: flag


_Parsed = tuple[Optional[str], dict[str, Any], Optional[Any], Optional[tuple[str, str]]]


def parse_command(raw: bytes) -> _Parsed:
    """(request_id, args, auth, error); auth is the raw ``auth`` value (authz.py checks it) or None. The request
    id is returned whenever it is readable, so that even an error reply can be matched by the caller."""
    if not raw.strip():
        return None, {}, None, None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: also integers over 4300 digits
        return None, {}, None, ("bad_request", f"payload is not UTF-8 JSON that can be read: {str(exc)[:200]}")
    if not isinstance(doc, dict):
        return None, {}, None, ("bad_request", f"payload must be a JSON object, got {type(doc).__name__}")
    request_id = doc.get("request_id")
    if request_id is not None and (not isinstance(request_id, str) or not 1 <= len(request_id) <= 128):
        return None, {}, None, ("bad_request", "request_id must be a string of 1-128 characters")
    unknown = sorted(set(doc) - {"request_id", "args", "auth"})
    if unknown:
        return request_id, {}, None, ("bad_request", f"unknown keys {unknown}; a command has only 'request_id', "
                                      "'args' and 'auth'")
    args = doc.get("args", {})
    if not isinstance(args, dict):
        return request_id, {}, None, ("bad_request", f"args must be a JSON object, got {type(args).__name__}")
    return request_id, args, doc.get("auth"), None
