"""``appliance check-config``: validate a config file and check it against this machine, or print its schema."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from appliance.appconfig.check import check_config, config_json_schema, report_dict
from appliance.commands.configload import load_and_report
from appliance.exitcodes import ExitCode
from appliance.paths import installed_config


def run(args: argparse.Namespace) -> int:
    if args.schema:
        sys.stdout.write(config_json_schema())
        return ExitCode.OK
    if args.file and args.config and Path(args.file) != Path(args.config):
        print("error: give the config once: FILE or --config FILE", file=sys.stderr)
        return ExitCode.BAD_INPUT
    given = args.config or args.file
    path = Path(given) if given else installed_config()  # an installed device's own config by default
    if path is None:
        print("error: give a config FILE (or --schema)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.json:
        report = check_config(path, machine=not args.no_machine, reach=not args.no_machine)
        print(json.dumps(report_dict(report), indent=2))
        return ExitCode.OK if report.ok else ExitCode.FAILED
    config = load_and_report(path, machine=not args.no_machine, reach=not args.no_machine)
    return ExitCode.OK if config is not None else ExitCode.FAILED
