"""``appliance password``: a password's hash for any user list (``web.users``, ``opcua.users``), or with ``--user``
a users-file line: ``name:role:hash`` for OPC UA's users file, a YAML list item for the page's."""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from appliance.exitcodes import ExitCode
from appliance.passwords import hash_password

ROLES = {"opcua": ("reader", "operator"), "web": ("viewer", "operator")}


def _line(user: str, role: str, stored: str, users: str) -> str:
    if users == "web":
        return f'- {{name: {user}, role: {role}, password_hash: "{stored}"}}'
    return f"{user}:{role}:{stored}"


def run(args: argparse.Namespace) -> int:
    """The password from stdin when it is not a terminal (scripts), else asked twice without echo."""
    role = args.role or ROLES[args.users][0]
    if role not in ROLES[args.users]:
        print(f"error: --role for --for {args.users} is one of {', '.join(ROLES[args.users])}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
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
        print(json.dumps({"user": args.user, "role": role if args.user else None, "hash": stored}))
    else:
        print(_line(args.user, role, stored, args.users) if args.user else stored)
    return ExitCode.OK
