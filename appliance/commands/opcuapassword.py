"""``appliance opcua-password``: the hash of an OPC UA user's password, for ``opcua.users`` or a users file."""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from appliance.commands.exitcodes import ExitCode
from appliance.opcua.passwords import hash_password


def run(args: argparse.Namespace) -> int:
    """The password from stdin when it is not a terminal (scripts), else asked twice without echo."""
    if sys.stdin.isatty():
        password = getpass.getpass("OPC UA password: ")
        if getpass.getpass("again: ") != password:
            print("error: the two passwords differ", file=sys.stderr)
            return ExitCode.BAD_INPUT
    else:
        password = sys.stdin.readline().rstrip("\n")
    if len(password) < 8:
        print("error: use at least 8 characters", file=sys.stderr)
        return ExitCode.BAD_INPUT
    stored = hash_password(password)
    if args.json:
        print(json.dumps({"user": args.user, "role": args.role if args.user else None, "hash": stored}))
    else:
        print(f"{args.user}:{args.role}:{stored}" if args.user else stored)
    return ExitCode.OK
