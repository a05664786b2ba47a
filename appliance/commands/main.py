"""The ``appliance`` command line.

Every command's arguments are declared here, global options (``--log-level``, ``--log-format``) on every
command too, so they may come before or after it; its action is ``run(args)`` in ``appliance.commands.<name>``,
returning an :class:`~appliance.exitcodes.ExitCode`. That module is imported only when its command
runs (see ``_lazy``), so ``appliance --help`` stays fast and a missing optional dependency only affects the
command that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import appliance
from appliance.commands.bench import bench_names
from appliance.commands.mqttoptions import add_mqtt_client_arguments
from appliance.exitcodes import ExitCode
from appliance.logs import LOG_FORMAT_ENV, LOG_FORMATS, configure

DESCRIPTION = "Edge vision appliance: cameras, object detection on Triton, results over MQTT."
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def _lazy(command: str) -> Callable[[argparse.Namespace], int]:
    """The command's ``run``, imported when the command runs, not when the parser is built."""

    def run(args: argparse.Namespace) -> int:
        # Lazy on purpose: `appliance --help` stays fast, and a missing optional dependency breaks only its command.
        module = importlib.import_module(f"appliance.commands.{command}")
        return int(module.run(args))

    return run


def _add_rollout_parser(ota: Any) -> None:
    r = ota.add_parser("rollout", help="roll a bundle out to device groups in stages, canary first "
                                       "(docs/fleet-rollout.md)")
    r.add_argument("--bundle", required=True, type=Path, help="the signed bundle (its version and SHA-256 are read)")
    r.add_argument("--url", required=True, help="where the devices download it (https://, or http:// where "
                                                "ota.allow_http is set)")
    r.add_argument("--sign-key", required=True, type=Path, metavar="KEYFILE",
                   help="operator private key (PEM) that signs the desired state and any rollback command")
    r.add_argument("--trusted-key", action="append", type=Path,
                   help="public key the bundle must verify with (repeat; default: the public half of --sign-key)")
    r.add_argument("--group", action="append", required=True, metavar="NAME[=DEV1,DEV2]",
                   help="a group, in order (the first is the canary); devices listed, or discovered from their "
                        "retained status")
    r.add_argument("--soak", type=float, default=300.0, help="seconds each group must stay healthy (default 300)")
    r.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds a group's devices have to become active on the version (default 1800)")
    r.add_argument("--rollback-wait", type=float, default=120.0,
                   help="after a stop, seconds to wait for rolled-back devices to say so (default 120)")
    r.add_argument("--valid-for", type=float, default=7 * 86400.0, metavar="SECONDS",
                   help="how long each group's desired state holds: a device offline longer does not install it "
                        "(default 7 days)")
    r.add_argument("--discover-s", type=float, default=3.0, help="seconds to collect retained device status")
    r.add_argument("--rollout-id", help="name of this rollout (default: <version>-<random>)")
    r.add_argument("--json", action="store_true", help="the final table as JSON on stdout (progress on stderr)")
    add_mqtt_client_arguments(r)
    r.add_argument("--prefix", help="topic prefix (default: the --config's, else 'appliance')")


def _add_ota_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("ota", help="model updates: keys, signed bundles, push, offline install, rollback, status")
    ota = p.add_subparsers(dest="ota_command", required=True, metavar="ACTION")

    k = ota.add_parser("keygen", help="make an Ed25519 signing key pair")
    k.add_argument("--private", required=True, type=Path, help="private key file to create (mode 0600)")
    k.add_argument("--public", required=True, type=Path, help="public key file to create (for trusted_keys)")

    s = ota.add_parser("sign", help="build and sign a bundle from a directory with bundle.yaml")
    s.add_argument("source", type=Path)
    s.add_argument("--key", required=True, type=Path, help="private key (PEM)")
    s.add_argument("--out", required=True, type=Path, help="bundle file to write")

    u = ota.add_parser("push", help="deliver a bundle: into an inbox directory, or over MQTT")
    u.add_argument("bundle", type=Path, nargs="?")
    dest = u.add_mutually_exclusive_group()
    dest.add_argument("--inbox", type=Path, help="copy atomically into this watched directory")
    add_mqtt_client_arguments(u, broker_group=dest)  # or send it as the 'ota' command through a broker
    u.add_argument("--device", help="device id (with --mqtt; default with --config: that config's device)")
    u.add_argument("--prefix", help="topic prefix (with --mqtt; default: the --config's, else 'appliance')")
    how = u.add_mutually_exclusive_group()
    how.add_argument("--device-path", help="tell the device to install this path on the device")
    how.add_argument("--url", help="tell the device to download this URL")
    how.add_argument("--action", choices=["rollback", "status"], help="send an action instead of a bundle")
    u.add_argument("--chunk-bytes", type=int, default=256 << 10, help="chunk size when sending the bundle itself")
    u.add_argument("--sign-key", type=Path, metavar="KEYFILE", help="operator private key (PEM) that signs each "
                   "command (with --mqtt; a device refuses unsigned ones but --action status)")
    u.add_argument("--reply-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="wait this long for the device's reply and fail on a refusal (with --mqtt; 0: do not wait)")
    u.add_argument("--wait", type=float, default=900.0, metavar="SECONDS",
                   help="wait this long for the update's verdict on ota/status (active, or rejected/rolled_back "
                        "with its reason; exit 1 unless active or in time) (with --mqtt; 0: do not wait)")
    u.add_argument("--json", action="store_true", help="print what was sent, the verdict and an action's result "
                                                       "as JSON")

    _add_rollout_parser(ota)

    for name, text in (("install", "install a bundle while the appliance is stopped (no health watch)"),
                       ("rollback", "point back at the previous version (the appliance serves it at next start)"),
                       ("status", "show the active version, history and installed versions")):
        a = ota.add_parser(name, help=text)
        if name == "install":
            a.add_argument("bundle", type=Path)
            a.add_argument("--trusted-key", action="append", type=Path, required=True, help="public key (repeat)")
            a.add_argument("--no-golden", action="store_true", help="skip golden frames")
            a.add_argument("--builder", default="auto", choices=["auto", "tensorrt", "onnxruntime"])
        a.add_argument("--state-dir", help="state directory (default: the --config's paths.state_dir, else "
                                           "$APPLIANCE_STATE_DIR, else an installed device's /var/lib/appliance)")
        a.add_argument("--config", help="the appliance's YAML config, for its state directory (default: an "
                                        "installed device's config)")
        if name != "install":
            a.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """--log-level and --log-format; on a command, with no default, so they override the ones given before it."""
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="INFO" if top else argparse.SUPPRESS,
                        help="least severe log level shown (default INFO)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=None if top else argparse.SUPPRESS,
                        help=f"text, or json: one JSON object per line (default: ${LOG_FORMAT_ENV}, else text)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                if command.prog.split()[-1] != "bench":  # a benchmark's arguments are its own
                    _add_global_options(command, top=False)


def _add_tool_parsers(sub: Any) -> None:
    """The tools beside the service: password hashes and benchmarks."""
    p = sub.add_parser("password",
                       help="hash a user's password for any user list (read from stdin, or asked)")
    p.add_argument("--user", help="print a users-file line instead of the hash alone")
    p.add_argument("--for", dest="users", default="opcua", choices=["opcua", "web"],
                   help="with --user: an OPC UA users-file line `USER:ROLE:HASH` (default) or a web.users_file item")
    p.add_argument("--role", choices=["reader", "viewer", "operator"],
                   help="with --user: reader or operator (opcua), viewer or operator (web); default the first")
    p.add_argument("--json", action="store_true", help="print {user, role, hash} as JSON")
    p.set_defaults(func=_lazy("password"))

    p = sub.add_parser("bench", help="run a benchmark: " + ", ".join(bench_names()))
    p.add_argument("--json", action="store_true", help="print the key=value results as one JSON object (the "
                                                       "benchmark's output on stderr); also after NAME")
    p.add_argument("name", choices=bench_names())
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    p.set_defaults(func=_lazy("bench"))


def _add_clips_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "clips", help="event clips of cameras with record.enabled: list them, or export one as MP4")
    p.add_argument("action", choices=["list", "export"])
    p.add_argument("event_id", nargs="?", help="export: the event whose clip to write")
    p.add_argument("--config", help="the appliance's YAML config (default: an installed device's config, else "
                                    "the bundled demo)")
    p.add_argument("--camera", help="list: only this camera's clips")
    p.add_argument("--json", action="store_true", help="list: print the clips as JSON")
    p.add_argument("-o", "--output", help="export: the MP4 file to write (default: <event_id>.mp4 here)")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"appliance {appliance.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run the appliance (the bundled demo camera when no config is given)")
    p.add_argument("--config", help="YAML config file (default: the bundled demo)")
    p.add_argument("--triton-home", help="Triton distribution directory (default: discovered)")
    p.add_argument("--once", action="store_true", help="start, report readiness, stop cleanly and exit")
    p.set_defaults(func=_lazy("run"))

    p = sub.add_parser("check-config", help="validate a config file and check it against this machine")
    p.add_argument("file", nargs="?", help="YAML config file (default on an installed device: its config)")
    p.add_argument("--config", help="the same as FILE")
    p.add_argument("--json", action="store_true", help="print the report as JSON (problems included) on stdout")
    p.add_argument("--schema", action="store_true", help="print the config's JSON Schema (for editors) and exit")
    p.add_argument("--no-machine", action="store_true", help="only validate the file; skip checks of this machine")
    p.set_defaults(func=_lazy("checkconfig"))

    p = sub.add_parser("spool", help="MQTT messages the broker refused and the spool set aside: list, or requeue "
                                     "them (with the appliance stopped)")
    p.add_argument("action", choices=["list", "requeue"])
    p.add_argument("--config", help="the appliance's YAML config (default: an installed device's config, else "
                                    "the bundled demo)")
    p.add_argument("--id", type=int, action="append", dest="ids", help="requeue only this message (repeatable)")
    p.add_argument("--payload", action="store_true", help="list: print each payload too")
    p.add_argument("--json", action="store_true", help="list: print the messages as JSON")
    p.set_defaults(func=_lazy("spool"))

    _add_clips_parser(sub).set_defaults(func=_lazy("clips"))

    p = sub.add_parser("status", help="what the running appliance is doing (from its health endpoint)")
    p.add_argument("--url", help="health endpoint (default: the config's health.host and health.port, else "
                                 "http://127.0.0.1:9108)")
    p.add_argument("--config", help="the appliance's YAML config, for its health address (default: an installed "
                                    "device's config)")
    p.add_argument("--json", action="store_true", help="print the raw health summary")
    p.set_defaults(func=_lazy("status"))

    p = sub.add_parser("reload", help="have the running appliance apply its changed config (what changed, nothing "
                                      "else); print what it applied, refused or needs a restart for")
    p.add_argument("--config", help="the appliance's YAML config (default: an installed device's config)")
    p.add_argument("--pid", type=int, help="the appliance's process (default: the one its spool's lock names; "
                                           "the unit passes $MAINPID)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the outcome (default: "
                                                                 "%(default)s)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=_lazy("reload"))

    p = sub.add_parser("triton-info", help="show which Triton distribution the appliance would use")
    p.add_argument("--triton-home", help="Triton distribution directory (default: discovered)")
    p.add_argument("--json", action="store_true", help="print what was found as JSON")
    p.set_defaults(func=_lazy("tritoninfo"))

    p = sub.add_parser("build-engines", help="build, verify and cache an engine per model for this device")
    p.add_argument("--engines-dir", help="engine build profiles (default: $APPLIANCE_ENGINES_DIR or engines/)")
    p.add_argument("--models-dir", help="root for the profiles' ONNX paths (default: $APPLIANCE_MODELS_DIR)")
    p.add_argument("--state-dir", help="engine cache location (default: $APPLIANCE_STATE_DIR)")
    p.add_argument("--config", help="take the engines, state and models directories from this config's paths "
                                    "(a flag still wins)")
    p.add_argument("--builder", default="auto", choices=["auto", "tensorrt", "onnxruntime"])
    p.add_argument("--model", action="append", help="only this model (repeatable)")
    p.add_argument("--force", action="store_true", help="rebuild even when a verified engine is cached")
    p.add_argument("--json", action="store_true", help="print the installed engines as JSON")
    p.add_argument("--repository", help="then materialize the Triton model repository for this device here")
    p.set_defaults(func=_lazy("build_engines"))

    _add_ota_parser(sub).set_defaults(func=_lazy("ota"))

    _add_tool_parsers(sub)
    _add_global_options(parser, top=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.log_format is not None:
        os.environ[LOG_FORMAT_ENV] = args.log_format  # capture processes, spawned later, log the same way
    try:
        configure(args.log_level)
    except ValueError as exc:  # APPLIANCE_LOG_FORMAT names no format
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    return int(args.func(args) or 0)
