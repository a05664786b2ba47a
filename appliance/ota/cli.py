"""``appliance ota keygen|sign|push|install|rollback|status``. Exit codes: 0 ok, 1 refused/failed, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> argparse.ArgumentParser:
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
    dest = u.add_mutually_exclusive_group(required=True)
    dest.add_argument("--inbox", type=Path, help="copy atomically into this watched directory")
    dest.add_argument("--mqtt", metavar="HOST[:PORT]", help="send as the 'ota' command through this broker")
    u.add_argument("--device", help="device id (with --mqtt)")
    u.add_argument("--prefix", default="appliance", help="topic prefix (with --mqtt)")
    u.add_argument("--username")
    u.add_argument("--password")
    how = u.add_mutually_exclusive_group()
    how.add_argument("--device-path", help="tell the device to install this path on the device")
    how.add_argument("--url", help="tell the device to download this URL")
    how.add_argument("--action", choices=["rollback", "status"], help="send an action instead of a bundle")
    u.add_argument("--chunk-bytes", type=int, default=256 << 10, help="chunk size when sending the bundle itself")

    for name, text in (("install", "install a bundle while the appliance is stopped (no health watch)"),
                       ("rollback", "point back at the previous version (the appliance serves it at next start)"),
                       ("status", "show the active version, history and installed versions")):
        a = ota.add_parser(name, help=text)
        if name == "install":
            a.add_argument("bundle", type=Path)
            a.add_argument("--trusted-key", action="append", type=Path, required=True, help="public key (repeat)")
            a.add_argument("--no-golden", action="store_true", help="skip golden frames")
            a.add_argument("--builder", default="auto", choices=["auto", "tensorrt", "onnxruntime"])
        a.add_argument("--state-dir", help="state directory (default: $APPLIANCE_STATE_DIR)")
    return p


def run(args: argparse.Namespace) -> int:
    from appliance.ota.errors import OtaError, OtaRejected

    try:
        return _ACTIONS[args.ota_command](args)
    except OtaRejected as exc:
        print(f"rejected: {exc}", file=sys.stderr)
        return 1
    except OtaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _keygen(args: argparse.Namespace) -> int:
    from appliance.ota.signing import generate_keypair

    kid = generate_keypair(args.private, args.public)
    print(f"key {kid}: private {args.private}, public {args.public}")
    return 0


def _sign(args: argparse.Namespace) -> int:
    from appliance.ota.bundle import build_bundle

    manifest = build_bundle(args.source, args.key, args.out)
    print(f"{args.out}: {manifest.label}, {len(manifest.files)} file(s), {len(manifest.golden)} golden frame(s)")
    return 0


def _push(args: argparse.Namespace) -> int:
    from appliance.ota import push

    if args.inbox:
        if args.bundle is None:
            print("error: give the BUNDLE to copy into the inbox", file=sys.stderr)
            return 2
        print(push.push_to_inbox(args.bundle, args.inbox))
        return 0
    if not args.device:
        print("error: --mqtt needs --device", file=sys.stderr)
        return 2
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
        return 2
    n = push.push_mqtt(host, int(port or 1883), args.device, args.prefix, messages,
                       username=args.username, password=args.password)
    print(f"sent {n} message(s) to {args.prefix}/{args.device}/command/ota; follow {args.prefix}/{args.device}/reply")
    return 0


def _offline_manager(args: argparse.Namespace, trusted: Any = None) -> Any:
    from appliance.engines.paths import state_dir
    from appliance.ota.config import OtaConfig
    from appliance.ota.manager import OtaManager
    from appliance.ota.offline import OfflineSwitcher
    from appliance.ota.signing import TrustedKeys
    from appliance.serving.switcher import ModelSpec

    config = OtaConfig(check_golden=not getattr(args, "no_golden", False), builder=getattr(args, "builder", "auto"))
    return OtaManager(state_dir(args.state_dir), trusted or TrustedKeys({}), OfflineSwitcher(), config=config,
                      base_spec=lambda: ModelSpec(None, None, None),
                      status_cb=lambda s: print(json.dumps(s.to_dict()), file=sys.stderr, flush=True))


def _install(args: argparse.Namespace) -> int:
    from appliance.ota.signing import TrustedKeys

    manager = _offline_manager(args, TrustedKeys.from_paths(args.trusted_key))
    manager.store.recover()
    print(json.dumps(manager.install(args.bundle)))
    return 0


def _rollback(args: argparse.Namespace) -> int:
    print(json.dumps(_offline_manager(args).rollback()))
    return 0


def _status(args: argparse.Namespace) -> int:
    manager = _offline_manager(args)
    print(json.dumps({**manager.status(), "serving_at_next_start": manager.store.serving()}, indent=2))
    return 0


_ACTIONS = {"keygen": _keygen, "sign": _sign, "push": _push, "install": _install, "rollback": _rollback,
            "status": _status}
