"""A reload's outcome as the running appliance reports it, and where ``appliance reload`` finds it: the pid of the
appliance (the one its MQTT spool's lock file names) and ``<state_dir>/reload.json``, rewritten after every
reload with a number that counts the reloads of that process."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from appliance.durable import write_json_durably

OUTCOME_FILE = "reload.json"


@dataclass(frozen=True)
class ReloadOutcome:
    """One reload: refused (``ok`` false, ``problems`` as ``FILE:LINE: key: message``), or what it applied and
    what it left for a restart of the service."""

    file: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    needs_restart: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)
    seq: int = 0  # this process's reloads, from 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if not self.ok:
            return f"reload refused: {len(self.problems)} problem(s) in {self.file}; the running config stays"
        done = "; ".join(self.applied) or "nothing to apply"
        return done + (f"; needs restart: {', '.join(self.needs_restart)}" if self.needs_restart else "")


def outcome_path(state_dir: Path) -> Path:
    return state_dir / OUTCOME_FILE


def write_outcome(state_dir: Path, outcome: ReloadOutcome) -> None:
    write_json_durably(outcome_path(state_dir), outcome.as_dict())


def read_outcome(state_dir: Path) -> dict[str, Any] | None:
    """The last outcome written, or None when there is none (or it cannot be read yet)."""
    try:
        data = json.loads(outcome_path(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def appliance_pid(spool_path: Path) -> int | None:
    """The pid written in the spool's lock file (``appliance.mqtt.spooldb.take_process_lock``) when that process
    still runs; None otherwise."""
    try:
        pid = int(Path(str(spool_path) + ".lock").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid
