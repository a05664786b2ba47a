"""The ``appliance`` command line.

Subcommands import their implementation lazily so that ``appliance --help``
stays fast and a missing optional dependency only affects the command that
needs it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path
from typing import Sequence

import appliance
import appliance.bench


def _bench_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(appliance.bench.__path__) if not m.name.startswith("_"))


def _cmd_bench(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"appliance.bench.{args.name}")
    return int(module.main(args.bench_args) or 0)


def _cmd_run(args: argparse.Namespace) -> int:
    from appliance.commands.run import run

    return run(args)


def _cmd_check_config(args: argparse.Namespace) -> int:
    from appliance.appconfig.check import check_config, config_json_schema

    if args.schema:
        sys.stdout.write(config_json_schema())
        return 0
    if not args.file:
        print("error: give a config FILE (or --schema)", file=sys.stderr)
        return 2
    report = check_config(Path(args.file), machine=not args.no_machine)
    for issue in report.issues:
        print(issue, file=sys.stderr)
    print(report.summary(), file=sys.stderr if report.issues else sys.stdout)
    return 0 if report.ok else 1


def _cmd_status(args: argparse.Namespace) -> int:
    from appliance.commands.status import fetch_health, format_status

    try:
        health = fetch_health(args.url)
    except OSError as exc:
        print(f"no answer from {args.url} ({exc}): is the appliance running (systemctl status appliance) "
              "with health enabled?", file=sys.stderr)
        return 3
    print(json.dumps(health, indent=2) if args.json else format_status(health))
    return 0 if health.get("ok") else 1


def _cmd_triton_info(args: argparse.Namespace) -> int:
    from appliance.triton.locate import TritonNotFound, locate

    try:
        dist = locate(args.triton_home)
    except TritonNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(dist.describe())
    return 0


def _cmd_build_engines(args: argparse.Namespace) -> int:
    from appliance.commands.build_engines import run

    return run(args)


def _cmd_spool(args: argparse.Namespace) -> int:
    from appliance.commands.spool import run

    return run(args)


def _cmd_ota(args: argparse.Namespace) -> int:
    from appliance.commands.ota import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"appliance {appliance.__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run the appliance (the bundled demo camera when no config is given)")
    p.add_argument("--config", help="YAML config file (default: the bundled demo)")
    p.add_argument("--triton-home", help="Triton distribution directory (default: discovered)")
    p.add_argument("--once", action="store_true", help="start, report readiness, stop cleanly and exit")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("check-config", help="validate a config file and check it against this machine")
    p.add_argument("file", nargs="?", help="YAML config file")
    p.add_argument("--schema", action="store_true", help="print the config's JSON Schema (for editors) and exit")
    p.add_argument("--no-machine", action="store_true", help="only validate the file; skip checks of this machine")
    p.set_defaults(func=_cmd_check_config)

    p = sub.add_parser("spool", help="MQTT messages the broker refused and the spool set aside: list, or requeue "
                                     "them (with the appliance stopped)")
    p.add_argument("action", choices=["list", "requeue"])
    p.add_argument("--config", help="the appliance's YAML config (default: the bundled demo)")
    p.add_argument("--id", type=int, action="append", dest="ids", help="requeue only this message (repeatable)")
    p.add_argument("--payload", action="store_true", help="list: print each payload too")
    p.set_defaults(func=_cmd_spool)

    p = sub.add_parser("status", help="what the running appliance is doing (from its health endpoint)")
    p.add_argument("--url", default="http://127.0.0.1:9108", help="health endpoint (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the raw health summary")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("triton-info", help="show which Triton distribution the appliance would use")
    p.add_argument("--triton-home", help="Triton distribution directory (default: discovered)")
    p.set_defaults(func=_cmd_triton_info)

    p = sub.add_parser("build-engines", help="build, verify and cache an engine per model for this device")
    p.add_argument("--engines-dir", help="engine build profiles (default: $APPLIANCE_ENGINES_DIR or engines/)")
    p.add_argument("--models-dir", help="root for the profiles' ONNX paths (default: $APPLIANCE_MODELS_DIR)")
    p.add_argument("--state-dir", help="engine cache location (default: $APPLIANCE_STATE_DIR)")
    p.add_argument("--builder", default="auto", choices=["auto", "tensorrt", "onnxruntime"])
    p.add_argument("--model", action="append", help="only this model (repeatable)")
    p.add_argument("--force", action="store_true", help="rebuild even when a verified engine is cached")
    p.add_argument("--json", action="store_true", help="print the installed engines as JSON")
    p.add_argument("--repository", help="then materialize the Triton model repository for this device here")
    p.set_defaults(func=_cmd_build_engines)

    from appliance.commands.ota import add_parser as add_ota_parser  # argparse only; actions import lazily

    add_ota_parser(sub).set_defaults(func=_cmd_ota)

    p = sub.add_parser("bench", help="run a benchmark: " + ", ".join(_bench_names()))
    p.add_argument("name", choices=_bench_names())
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from appliance.logs import configure

    configure(args.log_level)
    return int(args.func(args) or 0)
