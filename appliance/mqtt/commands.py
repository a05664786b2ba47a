"""Commands: <prefix>/<device>/command/<name> in, one reply out per command, handlers off the network thread.

Job: keep the registry of command handlers; take command messages from paho (ignoring retained ones: a stale
command must not run on reconnect); run the handlers one at a time, in arrival order, on the commands thread;
answer each with a reply payload (result or error), on the MQTT 5 response topic with its correlation data when
given, else on <prefix>/<device>/reply. A repeated request_id gets the first reply again without running twice
(the last _RECENT_REQUESTS ids are remembered). A command that is not read-only (registered ``read_only``, or
read-only for these args) runs only once the authorizer accepts its signature (authz.py); a refusal is not
remembered by request_id, so it cannot shadow a later, signed command with the same id.

Threading contract:
- caller thread, before start(): ``register``.
- network thread: ``dispatch`` (paho's on_message); it only enqueues.
- commands thread: ``run`` and the handlers it calls; ``_recent`` is its alone. ``close`` (the stopping
  thread) enqueues the sentinel that ends ``run``.
- The client is read from ``shared.client`` (set once by start()); paho's publish() only queues the packet, the
  network thread writes it (see connection.build_client).
"""

from __future__ import annotations

import collections
import json
import logging
import queue
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

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
_Item = tuple[str, bytes, Optional[str], Optional[bytes]]  # name, payload, response topic, correlation data


class CommandRunner:
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
        self._recent: collections.OrderedDict[str, bytes] = collections.OrderedDict()

    def register(self, name: str, handler: CommandHandler, read_only: bool | ReadOnly = False) -> None:
        """``read_only``: True, or a predicate on the args; anything else must be signed (secure by default)."""
        check_id("command name", name)
        self._read_only[name] = read_only if callable(read_only) else _always(bool(read_only))
        self._handlers[name] = handler

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
        props = getattr(msg, "properties", None)
        response_topic = getattr(props, "ResponseTopic", None) if props is not None else None
        correlation = getattr(props, "CorrelationData", None) if props is not None else None
        self._queue.put((name, bytes(msg.payload), response_topic, correlation))

    def close(self) -> None:
        self._queue.put(None)

    def run(self) -> None:
        while True:
            item = self._queue.get()
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
        request_id, args, auth, error = parse_command(raw)
        if request_id is not None and request_id in self._recent:
            log.info("MQTT command %s request_id=%s is a repeat; resending the first reply", name, request_id)
            self._send_reply(self._recent[request_id], response_topic, correlation)
            return
        handler = self._handlers.get(name)
        if error is None and handler is None:
            known = ", ".join(sorted(self._handlers)) or "none"
            error = ("unknown_command", f"unknown command {name!r}; known: {known}")
        if error is None and not self._read_only[name](args):
            try:
                self._authorizer.authorize(name, request_id, args, auth)
            except CommandRefused as exc:
                self._send_reply(self._reply(name, request_id, None, (exc.code, exc.message)), response_topic,
                                 correlation)
                return
            except Exception as exc:  # e.g. the nonce file cannot be written: fail closed, and say why
                log.exception("MQTT command %s request_id=%s: could not check its signature", name, request_id)
                self._send_reply(self._reply(name, request_id, None, (
                    "internal", f"could not check the signature ({type(exc).__name__}: {exc}); it did not run")),
                    response_topic, correlation)
                return
        if error is None and handler is not None:
            try:
                result = handler(Command(name, request_id, args, self._topics.command(name))) or {}
                if not isinstance(result, Mapping):
                    raise TypeError(f"handler returned {type(result).__name__}, not a mapping")
            except CommandError as exc:
                error = (exc.code, exc.message)
            except Exception as exc:
                log.exception("MQTT command %s request_id=%s failed", name, request_id)
                error = ("internal", f"{type(exc).__name__}: {exc}")
        reply = self._reply(name, request_id, result, error)
        if request_id is not None:
            self._recent[request_id] = reply
            while len(self._recent) > _RECENT_REQUESTS:
                self._recent.popitem(last=False)
        self._send_reply(reply, response_topic, correlation)

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
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, {}, None, ("bad_request", f"payload is not UTF-8 JSON: {exc}")
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
