#!/usr/bin/env python3
"""Add or replace a user in a mosquitto password file, for machines without the `mosquitto_passwd` tool.

    scripts/mosquitto_passwd.py /etc/mosquitto/appliance.passwd line1-box07     # asks for the password
    printf '%s' "$PW" | scripts/mosquitto_passwd.py --stdin FILE USER           # scripted

Writes mosquitto 2.x's own hash format ($7$: PBKDF2-HMAC-SHA512, 12-byte random salt, 64-byte digest, by
default 101 iterations as `mosquitto_passwd` does), so mosquitto reads the file as if `mosquitto_passwd -b`
wrote it. The password is never an argument: arguments are visible to every user in the process list.
The file is written to a temporary name, mode 0600, and renamed over the old one. Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import hashlib
import os
import secrets
import sys
from pathlib import Path


def hash_password(password: str, iterations: int = 101) -> str:
    salt = secrets.token_bytes(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 64)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def set_user(path: Path, user: str, password: str, iterations: int = 101) -> None:
    lines = path.read_text().splitlines() if path.exists() else []
    kept = [line for line in lines if line.strip() and line.split(":", 1)[0] != user]
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(kept + [f"{user}:{hash_password(password, iterations)}"]) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("user")
    parser.add_argument("--stdin", action="store_true", help="read the password from stdin (trailing newline dropped)")
    parser.add_argument("--iterations", type=int, default=101)
    args = parser.parse_args(argv)
    if ":" in args.user or not args.user:
        print("error: a user name cannot be empty or contain ':'", file=sys.stderr)
        return 2
    if args.stdin:
        password = sys.stdin.read().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Reenter password: ") != password:
            print("error: the passwords do not match", file=sys.stderr)
            return 2
    if not password:
        print("error: empty password", file=sys.stderr)
        return 2
    set_user(args.file, args.user, password, args.iterations)
    return 0


if __name__ == "__main__":
    sys.exit(main())
