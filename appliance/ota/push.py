"""``appliance ota push``: deliver a bundle into a watched inbox (atomically) or over MQTT (chunks, a device-local
path, or a URL for the device to download)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

from appliance.ota.errors import OtaError


class PushError(OtaError):
    """The bundle could not be delivered (broker refused, not acknowledged, inbox unwritable)."""


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
              username: str | None = None, password: str | None = None, timeout_s: float = 30.0) -> int:
    """Publish each args dict as a command (QoS 1) to <prefix>/<device>/command/ota, waiting for each PUBACK."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"ota-push-{uuid.uuid4().hex[:8]}")
    if username:
        client.username_pw_set(username, password)
    connected = threading.Event()
    result: dict[str, Any] = {}

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any = None) -> None:
        result["reason"] = reason
        connected.set()

    client.on_connect = on_connect
    try:
        client.connect(host, port)
    except OSError as exc:
        raise PushError(f"cannot reach the broker at {host}:{port}: {exc}") from None
    client.loop_start()
    try:
        if not connected.wait(timeout_s) or getattr(result.get("reason"), "is_failure", False):
            raise PushError(f"broker {host}:{port} did not accept the connection: {result.get('reason')}")
        topic = f"{prefix}/{device}/command/ota"
        run_id = uuid.uuid4().hex[:8]
        for i, args in enumerate(args_list):
            info = client.publish(topic, json.dumps({"request_id": f"push-{run_id}-{i}", "args": args}), qos=1)
            info.wait_for_publish(timeout_s)
            if not info.is_published():
                raise PushError(f"message {i} to {topic} was not acknowledged within {timeout_s} s")
        return len(args_list)
    finally:
        client.loop_stop()
        client.disconnect()
