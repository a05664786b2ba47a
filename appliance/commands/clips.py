"""``appliance clips list|export``: the events' clips on this device, from the state dir (the appliance may be
running: the clip index and the segments are only read)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from appliance.appconfig.check import resolved_paths
from appliance.capture.recording.clips import ClipError, write_clip
from appliance.commands.configload import load_for_files
from appliance.exitcodes import ExitCode
from appliance.mqtt.messages import epoch_ms, iso_utc_ms
from appliance.pipeline.clipkeeper import find_entry, read_index


def _when(t: float) -> str:
    return iso_utc_ms(epoch_ms(t))


def _list(state_dir: Path, args: argparse.Namespace) -> int:
    entries = [e for e in read_index(state_dir) if args.camera in (None, e.camera_id)]
    if args.json:
        print(json.dumps([asdict(e) for e in entries], indent=2))
    else:
        for e in entries:
            print(f"{e.event_id}\t{e.camera_id}\t{_when(e.event_time)}\t{e.status}\t{_when(e.start)} .. "
                  f"{_when(e.written_end or e.end)}\t{e.frames} frames\t{e.reason}".rstrip())
    print(f"{len(entries)} clip(s) under {state_dir / 'clips'}", file=sys.stderr)
    return ExitCode.OK


def _export(state_dir: Path, args: argparse.Namespace) -> int:
    entry = find_entry(state_dir, args.event_id)
    if entry is None:
        print(f"error: no clip for event {args.event_id} (see `appliance clips list`)", file=sys.stderr)
        return ExitCode.FAILED
    dest = Path(args.output or f"{entry.event_id}.mp4")
    try:
        clip = write_clip(state_dir / "recordings" / entry.camera_id, entry.start, entry.end, dest)
    except ClipError as exc:
        print(f"error: event {entry.event_id}: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    print(f"{dest}: {clip.frames} frames, {_when(clip.start)} .. {_when(clip.end)} (camera {entry.camera_id})")
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    config = load_for_files(args.config)
    if config is None:
        return ExitCode.BAD_INPUT
    state_dir = resolved_paths(config)["state_dir"]
    if args.action == "list":
        return _list(state_dir, args)
    if not args.event_id:
        print("error: clips export needs the event id (see `appliance clips list`)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    return _export(state_dir, args)
