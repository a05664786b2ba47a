"""``appliance check-config``: validate a config file and check it against this machine, or print its schema."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.appconfig.check import config_json_schema
from appliance.commands.configload import load_and_report
from appliance.commands.exitcodes import ExitCode
from appliance.paths import installed_config


def run(args: argparse.Namespace) -> int:
    if args.schema:
        sys.stdout.write(config_json_schema())
        return ExitCode.OK
    path = Path(args.file) if args.file else installed_config()  # an installed device's own config by default
    if path is None:
        print("error: give a config FILE (or --schema)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    config = load_and_report(path, machine=not args.no_machine)
    return ExitCode.OK if config is not None else ExitCode.FAILED
