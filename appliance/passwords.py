"""Password hashes, one format for every user list (the page's users, OPC UA's users and users files):
``scrypt$<N>$<r>$<p>$<salt b64>$<hash b64>``, made by ``appliance password``. The older OPC UA layout, which
stores log2 N in the second field (``scrypt$14$8$1$...``), is still read; the two never collide, as N >= 1024.

Checking takes tens of milliseconds by design (a guessed password costs the guesser as much).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

PREFIX = "scrypt"
N, R, P = 2 ** 14, 8, 1
_MAXMEM = 256 * 1024 * 1024
_MIN_LOG2_N, _MAX_LOG2_N = 10, 20


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """The hash to put in a user list's ``password_hash`` (or a users file); a fresh salt unless given."""
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=N, r=R, p=P, dklen=32, maxmem=_MAXMEM)
    return "$".join((PREFIX, str(N), str(R), str(P), _b64(salt), _b64(digest)))


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes]:
    """(n, r, p, salt, digest); ValueError unless ``stored`` is a hash of either layout with sane parameters."""
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != PREFIX:
        raise ValueError(stored)
    cost, r, p = (int(x) for x in parts[1:4])
    n = 2 ** cost if _MIN_LOG2_N <= cost <= _MAX_LOG2_N else cost  # the older OPC UA layout: log2 N
    if not (2 ** _MIN_LOG2_N <= n <= 2 ** _MAX_LOG2_N and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
        raise ValueError(stored)
    try:
        salt, digest = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except binascii.Error:
        raise ValueError(stored) from None
    if len(digest) != 32:
        raise ValueError(stored)
    return n, r, p, salt, digest


def check_hash_format(value: str) -> None:
    """Raise ValueError unless ``value`` is a password hash (not a password in clear)."""
    try:
        _parse(value)
    except ValueError:
        raise ValueError("not a password hash (scrypt$16384$8$1$<salt>$<hash>): make one with "
                         "`appliance password`, and never put the password itself here") from None


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches ``stored`` (either layout; constant-time compare); False for a malformed hash."""
    try:
        n, r, p, salt, digest = _parse(stored)
    except ValueError:
        return False
    derived = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=32, maxmem=_MAXMEM)
    return hmac.compare_digest(derived, digest)
