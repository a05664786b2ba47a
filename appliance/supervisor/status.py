"""``appliance status``: what a running appliance is doing, from its local health endpoint."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def fetch_health(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """GET <url>/healthz; a 503 still carries the summary (the appliance is up but not healthy)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/healthz", timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return json.loads(exc.read())
        raise


def format_status(health: dict[str, Any]) -> str:
    verdict = "OK" if health.get("ok") else "NOT HEALTHY"
    lines = [f"{verdict}: {health.get('status', '')}",
             f"triton: {'ready' if health.get('triton_ready') else 'NOT READY'}"]
    cameras = health.get("cameras") or {}
    if cameras:
        lines.append("cameras:")
        width = max(len(c) for c in cameras)
        for camera_id, cam in sorted(cameras.items()):
            lines.append(f"  {camera_id:<{width}}  {cam.get('state') or 'unknown':<9}  inferred {cam.get('inferred', 0)}"
                         f"  skipped {cam.get('skipped', 0)}  errors {cam.get('errors', 0)}")
    return "\n".join(lines)
