"""The nonces of accepted signed commands, kept on disk so that a captured command cannot be replayed, not even
after a restart.

A nonce only needs remembering while its command could still pass the time check (issued at + max age + clock
skew); older ones are forgotten. The file is append-only, one ``<expires_ms> <nonce>`` line per accepted
command, flushed and fsynced before the command runs (a crash between the two leaves the nonce spent, never
reusable). On open it is compacted (expired lines dropped, written beside and renamed in: appliance/durable.py),
and again whenever dead lines outnumber the live ones. A torn last line (power cut mid-write) is skipped: its
command had not run yet.

Threading: one instance per publisher, used by the commands thread only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import IO, Optional

from appliance.durable import write_file_durably

_NONCE = re.compile(r"^[0-9a-f]{32,64}$")  # as authz.py accepts them
_COMPACT_AT = 1024  # lines in the file before dead ones are worth a rewrite


class NonceStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._expiry: dict[str, int] = {}
        self._lines = 0
        self._file: Optional[IO[str]] = None

    def open(self, now_ms: int) -> None:
        """Read the file (missing: empty), drop expired nonces, rewrite it compacted and open it for appending."""
        self._expiry = {}
        try:
            text = self.path.read_text("utf-8", errors="replace")
        except FileNotFoundError:
            text = ""
        lines = text.split("\n")[:-1]  # what follows the last newline is a torn write (or nothing)
        for line in lines:
            expires, _, nonce = line.partition(" ")
            if expires.isdigit() and _NONCE.match(nonce) and int(expires) > now_ms:
                self._expiry[nonce] = max(int(expires), self._expiry.get(nonce, 0))
        self._rewrite()

    def seen(self, nonce: str, now_ms: int) -> bool:
        expires = self._expiry.get(nonce)
        return expires is not None and expires > now_ms

    def add(self, nonce: str, expires_ms: int, now_ms: int) -> None:
        """Record ``nonce`` durably (returns once it is on disk)."""
        if self._file is None:
            self.open(now_ms)
        self._expiry[nonce] = expires_ms
        assert self._file is not None
        self._file.write(f"{expires_ms} {nonce}\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._lines += 1
        if self._lines >= _COMPACT_AT and self._lines > 2 * self._live(now_ms):
            self._rewrite()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _live(self, now_ms: int) -> int:
        self._expiry = {n: e for n, e in self._expiry.items() if e > now_ms}
        return len(self._expiry)

    def _rewrite(self) -> None:
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_durably(self.path, "".join(f"{e} {n}\n" for n, e in self._expiry.items()).encode())
        self._file = open(self.path, "a", encoding="utf-8")
        self._lines = len(self._expiry)
