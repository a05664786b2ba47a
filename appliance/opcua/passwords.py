"""OPC UA user passwords, kept as scrypt hashes: ``scrypt$<log2 n>$<r>$<p>$<salt b64>$<hash b64>``.

``verify`` takes tens of milliseconds by design (a guessed password costs the guesser as much); it runs on the
OPC UA server's own thread, never on the frame path.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path

PREFIX = "scrypt"
LOG2_N, R, P = 14, 8, 1


class PasswordFileError(ValueError):
    """A users file line that is not ``name:role:hash``; the message names the file and line."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _derive(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=2 ** log2_n, r=r, p=p, dklen=32,
                          maxmem=256 * 1024 * 1024)


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """The hash to put in ``opcua.users[].password_hash`` or a users file."""
    salt = salt if salt is not None else os.urandom(16)
    return "$".join((PREFIX, str(LOG2_N), str(R), str(P), _b64(salt), _b64(_derive(password, salt, LOG2_N, R, P))))


def check_hash_format(value: str) -> None:
    """Raise ValueError unless ``value`` is a hash ``hash_password`` writes (not a password in clear)."""
    parts = value.split("$")
    try:
        if len(parts) != 6 or parts[0] != PREFIX:
            raise ValueError
        log2_n, r, p = (int(x) for x in parts[1:4])
        if not (10 <= log2_n <= 20 and 1 <= r <= 32 and 1 <= p <= 16):
            raise ValueError
        base64.b64decode(parts[4], validate=True)
        if len(base64.b64decode(parts[5], validate=True)) != 32:
            raise ValueError
    except ValueError:
        raise ValueError("not a password hash (scrypt$14$8$1$<salt>$<hash>): make one with "
                         "`appliance opcua-password`, and never put the password itself here") from None


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored`` (constant-time compare)."""
    _, log2_n, r, p, salt, expected = stored.split("$")
    derived = _derive(password, base64.b64decode(salt), int(log2_n), int(r), int(p))
    return hmac.compare_digest(derived, base64.b64decode(expected))


@dataclass(frozen=True)
class UserEntry:
    name: str
    role: str
    password_hash: str


def read_users_file(path: Path) -> list[UserEntry]:
    """``name:role:hash`` lines; blank lines and ``#`` comments skipped."""
    entries = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(":")
        role, _, stored = rest.partition(":")
        try:
            if not name or role not in ("reader", "operator"):
                raise ValueError("expected name:role:hash with role reader or operator")
            check_hash_format(stored)
        except ValueError as exc:
            raise PasswordFileError(f"{path}:{number}: {exc}") from None
        entries.append(UserEntry(name, role, stored))
    return entries
