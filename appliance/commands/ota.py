"""``appliance ota keygen|sign|push|rollout|install|rollback|status``. Exit codes: 0 ok, 1 refused/failed, 2 bad
input (``rollout``: appliance.commands.rollout).

The arguments are declared in :mod:`appliance.commands.main`; ``install``, ``rollback`` and ``status`` work on
the state directory directly, with the appliance stopped (no Triton: an :class:`OfflineSwitcher`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from appliance.commands import rollout
from appliance.commands.exitcodes import ExitCode
from appliance.paths import state_dir
from appliance.ota import push
from appliance.ota.bundle import build_bundle
from appliance.ota.config import OtaConfig
from appliance.ota.errors import OtaError, OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.offline import OfflineSwitcher
from appliance.ota.operator import BrokerOptions
from appliance.ota.signing import TrustedKeys, generate_keypair
from appliance.serving.switcher import ModelSpec


def run(args: argparse.Namespace) -> int:
    try:
        return _ACTIONS[args.ota_command](args)
    except OtaRejected as exc:
        print(f"rejected: {exc}", file=sys.stderr)
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
    if not args.device:
        print("error: --mqtt needs --device", file=sys.stderr)
        return ExitCode.BAD_INPUT
    host, _, port = args.mqtt.partition(":")
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
    n = push.push_mqtt(host, int(port or 1883), args.device, args.prefix, messages,
                       username=args.username, password=args.password)
    print(f"sent {n} message(s) to {args.prefix}/{args.device}/command/ota; follow {args.prefix}/{args.device}/reply")
    return ExitCode.OK


def broker_options(args: argparse.Namespace) -> BrokerOptions:
    """The broker options of ``rollout`` (declared for ``push`` and ``rollout`` by main._add_broker_options)."""
    host, _, port = args.mqtt.partition(":")
    return BrokerOptions(host, int(port or 1883), args.username, args.password)


def _rollout(args: argparse.Namespace) -> int:
    return rollout.run(args, broker_options(args))


def _offline_manager(args: argparse.Namespace, trusted: TrustedKeys | None = None) -> OtaManager:
    config = OtaConfig(check_golden=not getattr(args, "no_golden", False), builder=getattr(args, "builder", "auto"))
    return OtaManager(state_dir(args.state_dir), trusted or TrustedKeys({}), OfflineSwitcher(), config=config,
                      base_spec=lambda: ModelSpec(None, None, None),
                      status_cb=lambda s: print(json.dumps(s.to_dict()), file=sys.stderr, flush=True))


def _install(args: argparse.Namespace) -> int:
    manager = _offline_manager(args, TrustedKeys.from_paths(args.trusted_key))
    manager.store.recover()
    print(json.dumps(manager.install(args.bundle)))
    return ExitCode.OK


def _rollback(args: argparse.Namespace) -> int:
    print(json.dumps(_offline_manager(args).rollback()))
    return ExitCode.OK


def _status(args: argparse.Namespace) -> int:
    manager = _offline_manager(args)
    print(json.dumps({**manager.status(), "serving_at_next_start": manager.store.serving()}, indent=2))
    return ExitCode.OK


_ACTIONS = {"keygen": _keygen, "sign": _sign, "push": _push, "install": _install, "rollback": _rollback,
            "status": _status, "rollout": _rollout}
