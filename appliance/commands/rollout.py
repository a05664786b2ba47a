"""``appliance ota rollout``: roll a bundle out to device groups in stages (the first group is the canary), watching
each group's ota/status and health for a soak time before widening, stopping (and rolling back the devices that
switched and turned unhealthy) when one fails. The decisions are :class:`appliance.fleet.rollout.Rollout`'s; this
module talks to the broker and prints (docs/fleet-rollout.md).

Exit codes: 0 every group is on the version and passed its soak, 1 the rollout stopped, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Sequence

import paho.mqtt.client as mqtt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.durable import sha256_file
from appliance.exitcodes import ExitCode
from appliance.fleet.broker import connect, publish_retained, send_command
from appliance.fleet.desiredstate import sign_desired
from appliance.fleet.rollout import Action, DeviceView, Rollout
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.topics import group_desired
from appliance.ota.desired import NAME, DesiredState
from appliance.ota.errors import OtaError
from appliance.ota.signing import TrustedKeys, key_id, load_private_key
from appliance.ota.unpack import verify_bundle

_POLL_S = 0.2


def run(args: argparse.Namespace, broker: MqttConfig) -> int:
    try:
        groups = [_parse_group(text) for text in args.group]
        key = load_private_key(args.sign_key)
        public = key.public_key()
        trusted = TrustedKeys.from_paths(args.trusted_key) if args.trusted_key else TrustedKeys(
            {key_id(public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)): public})
        manifest = verify_bundle(args.bundle, trusted, args.bundle.stat().st_size).manifest
        sha256 = sha256_file(args.bundle)
    except (OtaError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.valid_for <= 0:
        print("error: --valid-for must be more than 0 seconds", file=sys.stderr)
        return ExitCode.BAD_INPUT
    rollout_id = args.rollout_id or f"{manifest.version}-{uuid.uuid4().hex[:6]}"
    if not NAME.match(rollout_id):
        print(f"error: --rollout-id must be 1-64 of A-Z a-z 0-9 _ . -, got {rollout_id!r}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    inbox: queue.Queue[tuple[str, bytes]] = queue.Queue()
    try:
        cli = connect(broker, "ota-rollout", lambda topic, payload: inbox.put((topic, payload)))
    except OtaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    client = cli.client
    try:
        for leaf in ("status", "ota/status", "health"):
            client.subscribe(f"{args.prefix}/+/{leaf}", qos=1)
        seen: dict[str, dict[str, dict[str, Any]]] = {}
        _drain(inbox, args.prefix, seen, args.discover_s)
        missing = [name for name, devices in groups if not devices]
        groups = [(name, devices or _discovered(seen, name)) for name, devices in groups]
        empty = [name for name, devices in groups if not devices]
        if empty:
            print(f"error: no devices found for group(s) {', '.join(empty)}: give them (--group NAME=DEV1,DEV2) or "
                  f"check that those devices run with ota.group set (retained {args.prefix}/+/status)",
                  file=sys.stderr)
            return ExitCode.BAD_INPUT
        if missing:
            _say(args, "discovered " + "; ".join(f"{n}: {', '.join(d)}" for n, d in groups if n in missing))
        plan = Rollout(groups, manifest.version, rollout_id, soak_s=args.soak, timeout_s=args.timeout,
                       clock=time.monotonic, rollback_wait_s=args.rollback_wait)
        desired = {name: DesiredState(name, rollout_id, manifest.version, args.url, sha256, 0, 1)
                   for name, _ in groups}  # times are set when each is published
        _say(args, f"rollout {rollout_id}: {manifest.label} to {' -> '.join(n for n, _ in groups)}, soak "
                   f"{args.soak:g} s per group")
        _feed_seen(plan, seen)
        while not plan.finished:
            actions = plan.step()
            _print_changes(args, plan)
            for action in actions:
                _act(client, args, action, desired, key, rollout_id)
            if plan.finished:
                break
            _drain(inbox, args.prefix, seen, _POLL_S, plan, lambda: _print_changes(args, plan))
    except OtaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    finally:
        cli.close()
    _report(args, plan, rollout_id)
    return ExitCode.OK if plan.ok else ExitCode.FAILED


def _parse_group(text: str) -> tuple[str, list[str]]:
    name, _, devices = text.partition("=")
    listed = [d for d in devices.split(",") if d] if devices else []
    for value in (name, *listed):
        if not NAME.match(value):
            raise ValueError(f"--group {text!r}: {value!r} is not a group or device name")
    return name, listed


def _discovered(seen: dict[str, dict[str, dict[str, Any]]], group: str) -> list[str]:
    return sorted(d for d, doc in seen.get("status", {}).items() if doc.get("group") == group)


def _drain(inbox: queue.Queue[tuple[str, bytes]], prefix: str, seen: dict[str, dict[str, dict[str, Any]]],
           wait_s: float, plan: Rollout | None = None, after_each: Callable[[], None] | None = None) -> None:
    """Take what arrived within ``wait_s`` (retained messages first): the newest of each kind per device, fed to
    ``plan`` one by one (``after_each`` prints what changed, so every step of an install gets its line)."""
    end = time.monotonic() + wait_s
    while True:
        try:
            topic, payload = inbox.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            return
        parsed = _classify(topic, prefix, payload)
        if parsed is not None:
            kind, device, doc = parsed
            seen.setdefault(kind, {})[device] = doc
            if plan is not None:
                _feed(plan, kind, device, doc)
            if after_each is not None:
                after_each()


def _classify(topic: str, prefix: str, payload: bytes) -> tuple[str, str, dict[str, Any]] | None:
    rest = topic[len(prefix) + 1:].split("/") if topic.startswith(prefix + "/") else []
    kind = {("status",): "status", ("ota", "status"): "ota", ("health",): "health"}.get(tuple(rest[1:]))
    if kind is None:
        return None
    try:
        doc = json.loads(payload)
    except ValueError:
        return None
    return (kind, rest[0], doc) if isinstance(doc, dict) else None


def _feed(plan: Rollout, kind: str, device: str, doc: dict[str, Any]) -> None:
    {"status": plan.on_status, "ota": plan.on_ota_status, "health": plan.on_health}[kind](device, doc)


def _feed_seen(plan: Rollout, seen: dict[str, dict[str, dict[str, Any]]]) -> None:
    for kind, docs in seen.items():
        for device, doc in docs.items():
            _feed(plan, kind, device, doc)


def _act(client: mqtt.Client, args: argparse.Namespace, action: Action, desired: dict[str, DesiredState],
         key: Ed25519PrivateKey, rollout_id: str) -> None:
    if action.kind in ("publish", "stop"):
        topic = group_desired(args.prefix, action.target)
        now_ms = int(time.time() * 1000)
        if action.kind == "publish":
            desired[action.target] = replace(desired[action.target], issued_at_ms=now_ms,
                                             expires_at_ms=now_ms + int(args.valid_for * 1000))
        else:  # the retained document becomes a stop: a device that comes back later does not install it
            was = desired[action.target]
            desired[action.target] = replace(was, issued_at_ms=now_ms, state="stopped",
                                             expires_at_ms=max(was.expires_at_ms, now_ms + 1))
        publish_retained(client, topic, sign_desired(desired[action.target], key))
        _say(args, f"group {action.target}: {'stopped' if action.kind == 'stop' else 'desired'} state published "
                   f"on {topic}")
    else:
        send_command(client, args.prefix, action.target, "ota", {"action": "rollback"},
                              f"{rollout_id}-rollback-{action.target}", key)
        _say(args, f"{action.target}: rollback sent")


def _print_changes(args: argparse.Namespace, plan: Rollout) -> None:
    for view in plan.changes():
        _say(args, _progress(view))


def _progress(view: DeviceView) -> str:
    detail = f" ({view.detail})" if view.detail else ""
    return f"{view.group:<10} {view.device:<16} {view.verdict}{detail}"


def _say(args: argparse.Namespace, line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr if args.json else sys.stdout, flush=True)


def _report(args: argparse.Namespace, plan: Rollout, rollout_id: str) -> None:
    rows = plan.table()
    outcome = "done: every group is on the version" if plan.ok else f"stopped: {plan.reason}"
    if args.json:
        print(json.dumps({"rollout_id": rollout_id, "version": plan.version, "ok": plan.ok, "reason": plan.reason,
                          "devices": rows}, indent=2))
        return
    print(f"\nrollout {rollout_id} of version {plan.version}: {outcome}")
    print(_table(rows))


def _cell(value: Any, width: int = 90) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _table(rows: Sequence[dict[str, Any]]) -> str:
    cols = ("group", "device", "state", "serving", "detail")
    cells = [[_cell(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)
