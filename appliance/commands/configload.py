"""Load the appliance's config for a command and report what is wrong with it, the same way for every command.

Each problem is one line, ``FILE:LINE: key: message``, followed by a summary line; warnings (a camera whose source
is not there now) come first, and do not make the config bad. A command a person runs
prints them (problems to stderr); ``appliance run``, which runs under systemd, logs them so the journal gets
them at error priority.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from appliance.appconfig.app import AppConfig
from appliance.appconfig.check import CheckReport, check_config
from appliance.appconfig.demo import DEMO_CONFIG
from appliance.paths import installed_config


def load_and_report(path: Path, *, machine: bool = True, log: logging.Logger | None = None,
                    quiet_when_ok: bool = False, reach: bool = False) -> AppConfig | None:
    """The validated config, or None after reporting every problem.

    machine: also check the config against this machine (files, cameras, Triton, models), not only the file.
    reach: also try the brokers and RTSP cameras (check-config; `run` connects by itself).
    log: log through this logger instead of printing. quiet_when_ok: say nothing about a good config (a
    command whose stdout is its answer).
    """
    report = check_and_report(path, machine=machine, log=log, quiet_when_ok=quiet_when_ok, reach=reach)
    return report.config if report.ok else None


def check_and_report(path: Path, *, machine: bool = True, log: logging.Logger | None = None,
                     quiet_when_ok: bool = False, reach: bool = False) -> CheckReport:
    """``check_config``'s report, its warnings and problems reported as :func:`load_and_report` says."""
    report = check_config(path, machine=machine, reach=reach)
    for warning in report.warnings:
        if log is not None:
            log.warning("config: %s", warning)
        else:
            print(f"warning: {warning}", file=sys.stderr)
    if report.ok and report.config is not None:
        if not quiet_when_ok:
            if log is not None:
                log.info("config: %s", report.summary())
            else:
                print(report.summary())
        return report
    if log is not None:
        for issue in report.issues:
            log.error("config: %s", issue)
        log.error("%s; fix it and check with `appliance check-config %s`", report.summary(), path)
    else:
        for issue in report.issues:
            print(issue, file=sys.stderr)
        print(report.summary(), file=sys.stderr)
    return report


def load_for_files(given: str | None) -> AppConfig | None:
    """The config of a command that reads only the appliance's files (spool, clips): ``given``, else an installed
    device's, else the bundled demo's. Only the file is checked: those files are on disk whether or not this
    machine could run the cameras. Problems are printed; None when the config is bad."""
    path = Path(given) if given else installed_config() or DEMO_CONFIG
    return load_and_report(path, machine=False, quiet_when_ok=True)
