"""``appliance ota push``: deliver a bundle into a watched inbox (atomically) or over MQTT (chunks, a device-local
path, or a URL for the device to download), each command signed by an operator key when one is given
(appliance/ota/commandsig.py), and read the device's replies so that a refusal fails the push."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.ota.commandsig import sign_command
from appliance.ota.errors import OtaError


class PushError(OtaError):
    """The bundle could not be delivered (broker refused, not acknowledged, inbox unwritable)."""


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


def push_mqtt(host: str, port: int, device: str, prefix: str, args_list: list[dict[str, Any]], *,
              username: str | None = None, password: str | None = None, timeout_s: float = 30.0,
              sign_key: Optional[Ed25519PrivateKey] = None, reply_timeout_s: float = 0.0) -> int:
    """Publish each args dict as a command (QoS 1) to <prefix>/<device>/command/ota, waiting for each PUBACK;
    signed by ``sign_key`` if given. With ``reply_timeout_s`` > 0, also wait that long for the device's reply to
    the last one; an error reply to any (read as they come) raises PushRefused, no reply PushError."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"ota-push-{uuid.uuid4().hex[:8]}")
    if username:
        client.username_pw_set(username, password)
    connected = threading.Event()
    result: dict[str, Any] = {}

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any = None) -> None:
        result["reason"] = reason
        connected.set()

    run_id = uuid.uuid4().hex[:8]
    replies: dict[str, dict[str, Any]] = {}
    replied = threading.Condition()

    def on_message(_c: Any, _u: Any, msg: Any) -> None:
        try:
            doc = json.loads(msg.payload)
        except ValueError:
            return
        if isinstance(doc, dict) and str(doc.get("request_id", "")).startswith(f"push-{run_id}-"):
            with replied:
                replies[doc["request_id"]] = doc
                replied.notify_all()

    client.on_connect = on_connect
    client.on_message = on_message
    try:
        client.connect(host, port)
    except OSError as exc:
        raise PushError(f"cannot reach the broker at {host}:{port}: {exc}") from None
    client.loop_start()
    try:
        if not connected.wait(timeout_s) or getattr(result.get("reason"), "is_failure", False):
            raise PushError(f"broker {host}:{port} did not accept the connection: {result.get('reason')}")
        topic = f"{prefix}/{device}/command/ota"
        if reply_timeout_s > 0:
            _subscribe(client, f"{prefix}/{device}/reply", timeout_s)
        for i, args in enumerate(args_list):
            request_id = f"push-{run_id}-{i}"
            payload = ({"request_id": request_id, "args": args} if sign_key is None else
                       sign_command(sign_key, topic_prefix=prefix, device_id=device, command="ota", args=args,
                                    request_id=request_id))
            info = client.publish(topic, json.dumps(payload), qos=1)
            info.wait_for_publish(timeout_s)
            if not info.is_published():
                raise PushError(f"message {i} to {topic} was not acknowledged within {timeout_s} s")
            _raise_refusal(replies, replied)
        if reply_timeout_s > 0:
            last = f"push-{run_id}-{len(args_list) - 1}"
            with replied:
                replied.wait_for(lambda: last in replies, reply_timeout_s)
            _raise_refusal(replies, replied)
            if last not in replies:
                raise PushError(f"no reply from {device} within {reply_timeout_s:g} s on {prefix}/{device}/reply "
                                "(is it online? a signed command expires after mqtt.commands.max_age_s)")
        return len(args_list)
    finally:
        client.loop_stop()
        client.disconnect()


def _subscribe(client: Any, topic: str, timeout_s: float) -> None:
    """Subscribe and wait for the SUBACK, so no reply is missed."""
    done = threading.Event()
    client.on_subscribe = lambda *_a: done.set()
    client.subscribe(topic, qos=1)
    if not done.wait(timeout_s):
        raise PushError(f"the broker did not acknowledge the subscription to {topic} within {timeout_s} s")


def _raise_refusal(replies: dict[str, dict[str, Any]], lock: threading.Condition) -> None:
    with lock:
        errors = [r["error"] for r in replies.values() if not r.get("ok") and isinstance(r.get("error"), dict)]
    if errors:
        raise PushRefused(str(errors[0].get("code")), str(errors[0].get("message")))
