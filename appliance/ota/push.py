"""``appliance ota push``: deliver a bundle into a watched inbox (atomically) or over MQTT (chunks, a device-local
path, or a URL for the device to download)."""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

from appliance.ota import operator
from appliance.ota.operator import BrokerOptions, PushError

__all__ = ["PushError", "chunk_payloads", "push_mqtt", "push_to_inbox"]


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
    client = operator.connect(BrokerOptions(host, port, username, password, timeout_s), "ota-push")
    try:
        run_id = uuid.uuid4().hex[:8]
        for i, args in enumerate(args_list):
            operator.send_command(client, prefix, device, "ota", args, f"push-{run_id}-{i}", timeout_s)
        return len(args_list)
    finally:
        operator.close(client)
