"""`appliance reload` without a running appliance: what it answers, and where it looks (the state directory and
spool the config names, even a config it cannot validate). tests/supervisor/test_supervisor_reload_daemon.py
runs it against a real daemon."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from appliance.commands.main import main
from appliance.commands.reload import format_outcome
from appliance.exitcodes import ExitCode
from appliance.supervisor.reloadstate import appliance_pid


def _run(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["reload", *argv])
    return code, err.getvalue()


def test_no_config_file_is_bad_input(tmp_path: Path) -> None:
    code, err = _run("--config", str(tmp_path / "missing.yaml"))
    assert code == ExitCode.BAD_INPUT and "missing.yaml" in err


def test_no_running_appliance_is_no_answer_and_names_the_lock_it_read(tmp_path: Path) -> None:
    config = tmp_path / "appliance.yaml"
    config.write_text(f"device: {{id: d}}\npaths: {{state_dir: {tmp_path / 'st'}}}\n"
                      "mqtt: {host: localhost, spool: {path: s.db}}\ncameras: oops\n")  # invalid: still read
    code, err = _run("--config", str(config))
    assert code == ExitCode.NO_ANSWER and f"{tmp_path / 'st' / 's.db'}.lock" in err, err


def test_the_lock_names_a_live_process_or_nobody(tmp_path: Path) -> None:
    spool = tmp_path / "mqtt-spool.sqlite3"
    Path(f"{spool}.lock").write_text(str(os.getpid()))
    assert appliance_pid(spool) == os.getpid()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    Path(f"{spool}.lock").write_text(gone.stdout.strip())
    assert appliance_pid(spool) is None


def test_the_outcome_as_a_person_reads_it() -> None:
    refused = format_outcome({"ok": False, "file": "a.yaml", "problems": ["a.yaml:3: cameras: bad"]})
    assert refused.splitlines() == ["reload refused: a.yaml has problems; the running config stays",
                                    "  a.yaml:3: cameras: bad"]
    applied = format_outcome({"ok": True, "file": "a.yaml", "applied": ["camera c started"],
                              "needs_restart": ["model.name"]})
    assert "  camera c started" in applied and "  model.name" in applied and "needs restart" in applied
