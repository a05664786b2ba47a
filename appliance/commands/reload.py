"""``appliance reload``: have the running appliance read its config again and apply what changed (SIGHUP to its
process, the one its MQTT spool's lock file names), wait for its outcome and print it.

Exit codes: 0 applied (a change that needs a restart of the service is named, and not applied); 1 refused (the
config has problems; the running one stays); 2 no such config file; 3 no running appliance, or no outcome in time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from appliance import paths
from appliance.config.yamlsource import ConfigError, read_yaml
from appliance.exitcodes import ExitCode
from appliance.supervisor.reloadstate import appliance_pid, read_outcome


def run(args: argparse.Namespace) -> int:
    path = Path(args.config) if args.config else paths.installed_config()
    if path is None or not path.is_file():
        print(f"error: no config file {path or ''} (give --config FILE)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    state_dir, spool = _where(path)
    pid = args.pid or appliance_pid(spool)
    if pid is None:
        print(f"no running appliance found (no live process in {spool}.lock): is it running "
              "(systemctl status appliance)?", file=sys.stderr)
        return ExitCode.NO_ANSWER
    before = read_outcome(state_dir)
    os.kill(pid, signal.SIGHUP)
    outcome = _wait_for_outcome(state_dir, pid, before, args.timeout)
    if outcome is None:
        print(f"the appliance (pid {pid}) gave no reload outcome in {state_dir} within {args.timeout:.0f} s; "
              "see its log (journalctl -u appliance)", file=sys.stderr)
        return ExitCode.NO_ANSWER
    print(json.dumps(outcome, indent=2) if args.json else format_outcome(outcome))
    return ExitCode.OK if outcome.get("ok") else ExitCode.FAILED


def _where(path: Path) -> tuple[Path, Path]:
    """The state directory and the spool the config names, read from the file as it is (it may be the config
    the reload is about to refuse): ``paths.state_dir`` and ``mqtt.spool.path``, else their defaults."""
    try:
        data = read_yaml(path).data
    except ConfigError:
        data = {}
    explicit = _section(data, "paths").get("state_dir")
    state_dir = paths.state_dir(explicit if isinstance(explicit, str) else None)
    spool = _section(_section(data, "mqtt"), "spool").get("path")
    return state_dir, state_dir / (spool if isinstance(spool, str) else "mqtt-spool.sqlite3")


def _section(data: Any, key: str) -> dict[str, Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _wait_for_outcome(state_dir: Path, pid: int, before: dict[str, Any] | None,
                      timeout_s: float) -> dict[str, Any] | None:
    """The first outcome the process ``pid`` writes after ``before``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        outcome = read_outcome(state_dir)
        if outcome is not None and outcome.get("pid") == pid and (
                before is None or before.get("pid") != pid or outcome.get("seq", 0) > before.get("seq", 0)):
            return outcome
        time.sleep(0.1)
    return None


def format_outcome(outcome: dict[str, Any]) -> str:
    if not outcome.get("ok"):
        lines = [f"reload refused: {outcome.get('file')} has problems; the running config stays"]
        return "\n".join(lines + [f"  {problem}" for problem in outcome.get("problems", [])])
    applied = outcome.get("applied") or []
    lines = [f"reloaded {outcome.get('file')}: " + ("applied" if applied else "nothing to apply")]
    lines += [f"  {item}" for item in applied]
    lines += [f"  problem: {problem}" for problem in outcome.get("problems") or []]
    needs = outcome.get("needs_restart") or []
    if needs:
        lines.append("needs restart (not applied; systemctl restart appliance):")
        lines += [f"  {key}" for key in needs]
    return "\n".join(lines)
