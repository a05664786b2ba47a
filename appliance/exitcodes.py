"""The exit codes of every ``appliance`` command and benchmark, in one place (on the ground floor, so that
:mod:`appliance.bench` and :mod:`appliance.commands` import the same enum).

The values are a contract: ``systemd/appliance.service`` sets ``RestartPreventExitStatus=2`` (a bad config
does not fix itself, so systemd must not restart ``appliance run`` on it), scripts and tests read the rest.
The capture child process has its own codes (:mod:`appliance.capture.process`); they are not these.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    # It ran and the answer is no: a part failed (run), an update was refused (ota), an engine build failed,
    # check-config found problems, the appliance is degraded (status: WARNING), the spool cannot be used.
    FAILED = 1
    # What it was given can never work as it is: an invalid config (run, spool), wrong arguments, a bad
    # engine profile or a missing builder, a bundle or key OTA cannot read, no Triton (triton-info), a benchmark's
    # missing model or tool; and what a restart would meet again: too little space for the engine build
    # (build-engines, run), another appliance holding the state dir (run). status: CRITICAL (level failed).
    BAD_INPUT = 2
    # status: nothing answered at the health endpoint, or its config could not be read (UNKNOWN).
    NO_ANSWER = 3
