"""``appliance status``: what a running appliance is doing, from its local health endpoint."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from appliance.commands.exitcodes import ExitCode


def run(args: argparse.Namespace) -> int:
    """Print the health summary; exit OK only when the appliance says it is healthy."""
    try:
        health = fetch_health(args.url)
    except OSError as exc:
        print(f"no answer from {args.url} ({exc}): is the appliance running (systemctl status appliance) "
              "with health enabled?", file=sys.stderr)
        return ExitCode.NO_ANSWER
    print(json.dumps(health, indent=2) if args.json else format_status(health))
    return ExitCode.OK if health.get("ok") else ExitCode.FAILED


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
    pipeline = health.get("pipeline")
    if pipeline:
        lines.append(format_pipeline(pipeline))
    cameras = health.get("cameras") or {}
    if cameras:
        lines.append("cameras:")
        width = max(len(c) for c in cameras)
        for camera_id, cam in sorted(cameras.items()):
            dropped = f"  dropped {cam['dropped']}" if cam.get("dropped") else ""
            lines.append(f"  {camera_id:<{width}}  {cam.get('state') or 'unknown':<9}  inferred {cam.get('inferred', 0)}"
                         f"  skipped {cam.get('skipped', 0)}{dropped}  errors {cam.get('errors', 0)}")
    return "\n".join(lines)


_PIPELINE_STATES = {"crash_loop": "CRASH LOOP", "recovering": "RECOVERING"}  # shouted: they need a look


def format_pipeline(pipeline: dict[str, Any]) -> str:
    """The served pipeline's model recovery (appliance.serving.recovery.RecoveryStatus.to_dict())."""
    state = pipeline.get("state", "unknown")
    head = f"pipeline: {_PIPELINE_STATES.get(state, state)}"
    head += f" ({pipeline.get('route')})" if pipeline.get("route") else ""
    if state == "serving":
        return (f"{head}, {pipeline.get('reloads', 0)} model reload(s), "
                f"{pipeline.get('failures', 0)} recent failure(s)")
    retry = pipeline.get("next_retry_s")
    return (head + f": {', '.join(pipeline.get('models') or [])}: {pipeline.get('reason', '')}; "
            f"{pipeline.get('failures', 0)} failure(s), attempt {pipeline.get('attempt', 0)}"
            + (f", next reload in {retry:.0f} s" if retry is not None else ""))
