"""``appliance spool list|requeue``: the MQTT messages set aside because the broker would not take them.

A detection the broker keeps refusing (an ACL, a size limit) is moved out of the send queue so it cannot block
the ones behind it (docs/mqtt.md). Once the broker is fixed, an operator lists them and puts them back in the
queue; the appliance sends them at its next start. The spool belongs to one process at a time, so ``requeue`` runs
with the appliance stopped; ``list`` reads a running appliance's spool beside it, read-only.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

from appliance.appconfig.check import resolved_paths
from appliance.commands.configload import load_for_files
from appliance.exitcodes import ExitCode
from appliance.mqtt.errors import SpoolError
from appliance.mqtt.messages import epoch_ms, iso_utc_ms
from appliance.mqtt.setaside import SetAsideMessage, read_shared
from appliance.mqtt.spool import Spool


def _message_dict(m: SetAsideMessage, payload: bool) -> dict[str, object]:
    out: dict[str, object] = {"id": m.id, "set_at": iso_utc_ms(epoch_ms(m.set_at)), "topic": m.topic,
                              "bytes": len(m.payload), "reason": m.reason}
    if payload:
        out["payload"] = m.payload.decode("utf-8", "replace")
    return out


def _list(messages: list[SetAsideMessage], args: argparse.Namespace, path: Path) -> None:
    if args.json:
        print(json.dumps([_message_dict(m, args.payload) for m in messages], indent=2))
    else:
        for m in messages:
            payload = f"  {m.payload.decode('utf-8', 'replace')}" if args.payload else ""
            when = iso_utc_ms(epoch_ms(m.set_at))
            print(f"{m.id}\t{when}\t{m.topic}\t{len(m.payload)} bytes\t{m.reason}{payload}")
    print(f"{len(messages)} message(s) set aside in {path}", file=sys.stderr)


def _list_shared(args: argparse.Namespace, path: Path, held: SpoolError) -> int:
    try:
        messages = read_shared(str(path))
    except sqlite3.Error as exc:
        print(f"error: {held}, and reading beside it failed: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    _list(messages, args, path)
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    config = load_for_files(args.config)
    if config is None:
        return ExitCode.BAD_INPUT
    path = config.mqtt.spool_path(resolved_paths(config)["state_dir"])
    if not path.exists():
        print(f"error: no spool at {path}: the appliance has not run with this config", file=sys.stderr)
        return ExitCode.FAILED
    spool = Spool(path, config.mqtt.spool)
    try:
        spool.open()
    except SpoolError as exc:
        if args.action == "list":  # the appliance runs: read beside it, changing nothing
            return _list_shared(args, path, exc)
        print(f"error: {exc}; stop the appliance first (systemctl stop appliance)", file=sys.stderr)
        return ExitCode.FAILED
    try:
        if args.action == "list":
            _list(spool.set_aside_messages(), args, path)
            return ExitCode.OK
        wanted = sorted(set(args.ids)) if args.ids else None
        if wanted:
            known = {m.id for m in spool.set_aside_messages()}
            unknown = [i for i in wanted if i not in known]
            if unknown:
                print(f"error: no set-aside message with id {', '.join(map(str, unknown))} "
                      f"(see `appliance spool list`)", file=sys.stderr)
                return ExitCode.FAILED
        moved = spool.requeue_set_aside(wanted)
        print(f"requeued {moved} message(s); the appliance sends them when it starts "
              f"(one the broker still refuses is set aside again)")
        return ExitCode.OK
    except SpoolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    finally:
        spool.close()
