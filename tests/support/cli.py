"""`python -m appliance ...` as a subprocess: the tests' one way to run the appliance's command line.

``run_appliance`` waits for the command and, unless told otherwise, fails the test with the command's output when
its exit code is not the one expected; ``appliance_argv`` and ``appliance_env`` are the same command line and
environment for a test that needs a ``Popen`` (a daemon, a command killed mid-way)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Collection, Mapping

REPO = Path(__file__).resolve().parents[2]


def appliance_argv(*args: str) -> list[str]:
    """``python -m appliance ARGS`` with this interpreter (the test run's virtual environment)."""
    return [sys.executable, "-m", "appliance", *args]


def appliance_env(env: Mapping[str, str] | None = None, unset: Collection[str] = ()) -> dict[str, str]:
    """The test's environment with ``env`` added and ``unset`` taken out. NOTIFY_SOCKET is never inherited: a
    command only reports to a notify socket the test hands it in ``env``."""
    inherited = {k: v for k, v in os.environ.items() if k not in unset and k != "NOTIFY_SOCKET"}
    return {**inherited, **(env or {})}


def run_appliance(*args: str, expect: int | None = 0, timeout: float = 120, env: Mapping[str, str] | None = None,
                  unset: Collection[str] = (), cwd: Path = REPO,
                  input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``appliance ARGS`` to its end (text output captured, ``input`` on its stdin) and return it.

    With ``expect`` (0 unless given), an exit code other than ``expect`` fails with the command line, the exit
    code and the output's tails; ``expect=None`` leaves the exit code to the caller. A command still running
    after ``timeout`` seconds is killed and raises ``subprocess.TimeoutExpired``."""
    done = subprocess.run(appliance_argv(*args), capture_output=True, text=True, timeout=timeout,
                          env=appliance_env(env, unset), cwd=cwd, input=input)
    if expect is not None and done.returncode != expect:
        raise AssertionError(f"`appliance {' '.join(args)}` exited with {done.returncode}, not {expect}\n"
                             f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
    return done
