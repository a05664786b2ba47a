"""OPC UA users: a users file of ``name:role:hash`` lines. The hashes are appliance.passwords' (one format for
every user list); checking one runs on the OPC UA server's own thread, never on the frame path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.passwords import check_hash_format, hash_password, verify_password

__all__ = ["PasswordFileError", "UserEntry", "check_hash_format", "hash_password", "read_users_file",
           "verify_password"]


class PasswordFileError(ApplianceError, ValueError):
    """A users file line that is not ``name:role:hash``; the message names the file and line."""


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
