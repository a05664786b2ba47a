"""``appliance ota keygen|sign|push|rollout|install|rollback|status``. Exit codes: 0 ok, 1 refused/failed, 2 bad
input (``rollout``: appliance.commands.rollout).

The arguments are declared in :mod:`appliance.commands.main`; ``install``, ``rollback`` and ``status`` work on
the state directory directly, with the appliance stopped (no Triton: an :class:`OfflineSwitcher`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from appliance.appconfig.check import resolved_paths
from appliance.commands import rollout
from appliance.commands.configload import load_and_report
from appliance.commands.mqttoptions import MqttOptionsError, mqtt_config_from_args
from appliance.detector.serving.switcher import ModelSpec
from appliance.exitcodes import ExitCode
from appliance.fleet import push
from appliance.fleet.bundle import build_bundle
from appliance.ota.config import OtaConfig
from appliance.ota.errors import OtaError, OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.signing import TrustedKeys, generate_keypair, load_private_key
from appliance.paths import installed_config, state_dir


def run(args: argparse.Namespace) -> int:
    try:
        return _ACTIONS[args.ota_command](args)
    except OtaRejected as exc:
        print(f"rejected: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    except push.PushRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    except push.PushTimeout as exc:  # no reply, or no verdict in time
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    except OtaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT


def _keygen(args: argparse.Namespace) -> int:
    kid = generate_keypair(args.private, args.public)
    print(f"key {kid}: private {args.private}, public {args.public}")
    return ExitCode.OK


def _sign(args: argparse.Namespace) -> int:
    manifest = build_bundle(args.source, args.key, args.out)
    print(f"{args.out}: {manifest.label}, {len(manifest.files)} file(s), {len(manifest.golden)} golden frame(s)")
    return ExitCode.OK


def _push(args: argparse.Namespace) -> int:
    if args.inbox:
        if args.bundle is None:
            print("error: give the BUNDLE to copy into the inbox", file=sys.stderr)
            return ExitCode.BAD_INPUT
        print(push.push_to_inbox(args.bundle, args.inbox))
        return ExitCode.OK
    if args.mqtt is None and args.mqtt_config_file is None:
        print("error: give --inbox DIR, or the broker: --mqtt HOST[:PORT] or --config APPLIANCE_YAML", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        broker = mqtt_config_from_args(args)
    except MqttOptionsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    from_file = args.mqtt_config_file is not None
    device = args.device or (broker.device_id if from_file else None)
    prefix = args.prefix or (broker.topic_prefix if from_file else "appliance")
    if not device:
        print("error: --mqtt needs --device", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.action:
        messages: list[dict[str, Any]] = [{"action": args.action}]
    elif args.device_path:
        messages = [{"path": args.device_path}]
    elif args.url:
        messages = [{"url": args.url}]
    elif args.bundle is not None:
        messages = list(push.chunk_payloads(args.bundle, args.chunk_bytes))
    else:
        print("error: give a BUNDLE, --device-path, --url or --action", file=sys.stderr)
        return ExitCode.BAD_INPUT
    sign_key = load_private_key(args.sign_key) if args.sign_key else None
    outcome = push.send_commands(broker, device, prefix, messages, sign_key=sign_key,
                                 reply_timeout_s=args.reply_timeout,
                                 verdict_timeout_s=0.0 if args.action else args.wait)
    return _print_outcome(args, outcome, f"{prefix}/{device}")


def _print_outcome(args: argparse.Namespace, outcome: push.PushOutcome, base: str) -> int:
    """The device's verdict (an update), the action's result, or what was sent (no waiting); exit 1 unless the
    update became active."""
    verdict, result = outcome.verdict, (outcome.reply or {}).get("result")
    ok = verdict is None or verdict.get("state") == "active"
    if args.json:
        print(json.dumps({"sent": outcome.sent, "verdict": verdict, "result": result}, indent=2))
    elif verdict is not None:
        code = f" ({verdict['code']})" if verdict.get("code") else ""
        text = f"{verdict['state']}{code}: {verdict.get('message', '')}"
        print(text if ok else f"refused: the device's verdict: {text}", file=sys.stdout if ok else sys.stderr)
    elif args.action and result is not None:
        print(json.dumps(result, indent=2))
    else:
        print(f"sent {outcome.sent} message(s) to {base}/command/ota; follow {base}/ota/status")
    return ExitCode.OK if ok else ExitCode.FAILED


def _rollout(args: argparse.Namespace) -> int:
    try:
        broker = mqtt_config_from_args(args)
    except MqttOptionsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    args.prefix = args.prefix or (broker.topic_prefix if args.mqtt_config_file is not None else "appliance")
    return rollout.run(args, broker)


def _state_dir(args: argparse.Namespace) -> Path:
    """--state-dir, else the state directory of --config (or of an installed device's config), else the default
    (paths.state_dir: $APPLIANCE_STATE_DIR, a checkout's .state); said on stderr unless it was given."""
    if args.state_dir:
        return Path(args.state_dir)
    path = Path(args.config) if args.config else installed_config()
    if path is not None:
        config = load_and_report(path, machine=False, quiet_when_ok=True)
        if config is None:
            raise OtaError(f"cannot read the state directory from {path}")
        found, source = resolved_paths(config)["state_dir"], f"paths.state_dir of {path}"
    else:
        found, source = state_dir(), "no --config nor installed device: the default"
    print(f"state directory: {found} ({source})", file=sys.stderr)
    return found


def _offline_manager(args: argparse.Namespace, trusted: TrustedKeys | None = None) -> OtaManager:
    config = OtaConfig(check_golden=not getattr(args, "no_golden", False), builder=getattr(args, "builder", "auto"))
    args.state_dir = str(_state_dir(args))
    return OtaManager(Path(args.state_dir), trusted or TrustedKeys({}), OfflineSwitcher(), config=config,
                      base_spec=lambda: ModelSpec(None, None, None),
                      status_cb=lambda s: print(json.dumps(s.to_dict()), file=sys.stderr, flush=True))


def _install(args: argparse.Namespace) -> int:
    manager = _offline_manager(args, TrustedKeys.from_paths(args.trusted_key))
    manager.store.recover()
    print(json.dumps(manager.install(args.bundle)))
    return ExitCode.OK


def _rollback(args: argparse.Namespace) -> int:
    done = _offline_manager(args).rollback()
    if args.json:
        print(json.dumps(done))
    else:
        print(f"rolled back from {done.get('from') or 'base'} to {done.get('to') or 'base'}; the appliance serves "
              "it at its next start")
    return ExitCode.OK


def _status(args: argparse.Namespace) -> int:
    manager = _offline_manager(args)
    status = {**manager.status(), "serving_at_next_start": manager.store.serving(),
              "state_dir": str(state_dir(args.state_dir))}
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        for key, value in status.items():
            if key == "history":  # versions served before, oldest first; None is the base model
                value = ", ".join(v or "base" for v in value) or "none"
            print(f"{key}: {value if isinstance(value, str) else 'none' if value is None else json.dumps(value)}")
    return ExitCode.OK


_ACTIONS = {"keygen": _keygen, "sign": _sign, "push": _push, "install": _install, "rollback": _rollback,
            "status": _status, "rollout": _rollout}
