"""``appliance ota push``: deliver a bundle into a watched inbox (atomically) or over MQTT (chunks, a device-local
path, or a URL for the device to download), each command signed by an operator key when one is given
(appliance/ota/commandsig.py), and read the device's replies and the update's final ota/status, so that a
refusal fails the push."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.mqtt.cliclient import CliClient
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.errors import MqttError
from appliance.ota.commandsig import sign_command
from appliance.ota.errors import OtaError
from appliance.ota.status import FINAL_STATES


class PushError(OtaError):
    """The bundle could not be delivered (broker refused, not acknowledged, inbox unwritable)."""


class PushTimeout(PushError):
    """Delivered, but the device's reply or the update's verdict did not come in time."""


class PushRefused(PushError):
    """The device answered a command with an error reply (``code``: its error code, e.g. ``unsigned``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"the device refused it ({code}): {message}")
        self.code = code


def push_to_inbox(bundle: Path, inbox: Path) -> Path:
    """Copy next to the final name, fsync, rename: the watcher never sees half a bundle."""
    inbox.mkdir(parents=True, exist_ok=True)
    final = inbox / (bundle.name if bundle.name.endswith(".bundle") else bundle.name + ".bundle")
    tmp = inbox / f".{final.name}.part-{os.getpid()}"
    try:
        with open(bundle, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def chunk_payloads(bundle: Path, chunk_bytes: int, upload_id: str | None = None) -> Iterator[dict[str, Any]]:
    size = bundle.stat().st_size
    count = max(1, -(-size // chunk_bytes))
    uid = upload_id or uuid.uuid4().hex[:16]
    with open(bundle, "rb") as f:
        for index in range(count):
            yield {"upload_id": uid, "index": index, "count": count,
                   "data": base64.b64encode(f.read(chunk_bytes)).decode()}


@dataclass(frozen=True)
class PushOutcome:
    """What came back: how many commands were sent, the device's reply to the last one (when waited for), and
    the final ota/status of the update it started (``state`` active, rejected or rolled_back; when waited for)."""

    sent: int
    reply: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None


def push_mqtt(broker: MqttConfig, device: str, prefix: str, args_list: list[dict[str, Any]], *,
              timeout_s: float = 30.0, sign_key: Optional[Ed25519PrivateKey] = None,
              reply_timeout_s: float = 0.0) -> int:
    """:func:`send_commands` without waiting for a verdict; the number of commands sent."""
    return send_commands(broker, device, prefix, args_list, timeout_s=timeout_s, sign_key=sign_key,
                         reply_timeout_s=reply_timeout_s).sent


def send_commands(broker: MqttConfig, device: str, prefix: str, args_list: list[dict[str, Any]], *,
                  timeout_s: float = 30.0, sign_key: Optional[Ed25519PrivateKey] = None,
                  reply_timeout_s: float = 0.0, verdict_timeout_s: float = 0.0) -> PushOutcome:
    """Publish each args dict as a command (QoS 1) to <prefix>/<device>/command/ota, waiting for each PUBACK;
    signed by ``sign_key`` if given. With ``reply_timeout_s`` > 0, also wait that long for the device's reply to
    the last one; an error reply to any (read as they come) raises PushRefused, no reply PushError. With
    ``verdict_timeout_s`` > 0, then wait that long for the final ota/status of the update the last command
    started (no verdict in time: PushError).

    ``broker``: where and how to connect (TLS, credentials), as for the appliance itself; see
    appliance.commands.mqttoptions for how the CLI builds it."""
    run_id = uuid.uuid4().hex[:8]
    last = f"push-{run_id}-{len(args_list) - 1}"
    replies: dict[str, dict[str, Any]] = {}
    verdicts: list[dict[str, Any]] = []
    replied = threading.Condition()

    def on_message(_c: Any, _u: Any, msg: Any) -> None:
        try:
            doc = json.loads(msg.payload)
        except ValueError:
            return
        if not isinstance(doc, dict) or not str(doc.get("request_id", "")).startswith(f"push-{run_id}-"):
            return
        with replied:
            if doc.get("type") == "ota_status":
                if doc.get("request_id") == last and doc.get("state") in FINAL_STATES:
                    verdicts.append(doc)
            else:
                replies[doc["request_id"]] = doc
            replied.notify_all()

    try:
        with CliClient(broker, "ota-push", timeout_s) as client:
            client.on_message = on_message
            topic = f"{prefix}/{device}/command/ota"
            if reply_timeout_s > 0 or verdict_timeout_s > 0:
                _subscribe(client, f"{prefix}/{device}/reply", timeout_s)
            if verdict_timeout_s > 0:
                _subscribe(client, f"{prefix}/{device}/ota/status", timeout_s)
            for i, args in enumerate(args_list):
                _publish(client, topic, i, args, f"push-{run_id}-{i}", sign_key, prefix, device, timeout_s)
                _raise_refusal(replies, replied)
            if reply_timeout_s > 0:
                with replied:
                    replied.wait_for(lambda: last in replies, reply_timeout_s)
                _raise_refusal(replies, replied)
                if last not in replies:
                    raise PushTimeout(f"no reply from {device} within {reply_timeout_s:g} s on "
                                    f"{prefix}/{device}/reply (is it online? may this login read it? a signed "
                                    "command expires after mqtt.commands.max_age_s)")
            if verdict_timeout_s > 0:
                with replied:  # a refusing reply to a command ends the wait too
                    replied.wait_for(lambda: bool(verdicts) or _refused(replies), verdict_timeout_s)
                _raise_refusal(replies, replied)
                if not verdicts:
                    raise PushTimeout(f"no verdict from {device} within {verdict_timeout_s:g} s on "
                                    f"{prefix}/{device}/ota/status (the update may still be running: "
                                    "`appliance ota push --action status` shows where it is)")
            return PushOutcome(len(args_list), replies.get(last), verdicts[0] if verdicts else None)
    except MqttError as exc:
        raise PushError(str(exc)) from None


def _publish(client: Any, topic: str, index: int, args: dict[str, Any], request_id: str,
             sign_key: Optional[Ed25519PrivateKey], prefix: str, device: str, timeout_s: float) -> None:
    payload = ({"request_id": request_id, "args": args} if sign_key is None else
               sign_command(sign_key, topic_prefix=prefix, device_id=device, command="ota", args=args,
                            request_id=request_id))
    info = client.publish(topic, json.dumps(payload), qos=1)
    try:
        info.wait_for_publish(timeout_s)
    except RuntimeError as exc:  # not queued: the broker closed the connection
        raise PushError(f"message {index} to {topic} was not sent: {exc}") from None
    if not info.is_published():
        raise PushError(f"message {index} to {topic} was not acknowledged within {timeout_s} s")


def _subscribe(client: Any, topic: str, timeout_s: float) -> None:
    """Subscribe and wait for the SUBACK, so no reply is missed."""
    done = threading.Event()
    client.on_subscribe = lambda *_a: done.set()
    client.subscribe(topic, qos=1)
    if not done.wait(timeout_s):
        raise PushError(f"the broker did not acknowledge the subscription to {topic} within {timeout_s} s")


def _refused(replies: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["error"] for r in replies.values() if not r.get("ok") and isinstance(r.get("error"), dict)]


def _raise_refusal(replies: dict[str, dict[str, Any]], lock: threading.Condition) -> None:
    with lock:
        errors = _refused(replies)
    if errors:
        raise PushRefused(str(errors[0].get("code")), str(errors[0].get("message")))
