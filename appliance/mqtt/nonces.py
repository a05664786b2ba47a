"""The nonces of accepted signed commands, kept on disk so that a captured command cannot be replayed, not even
after a restart.

A nonce is fsynced before its command runs (a crash in between leaves it spent, never reusable) and forgotten the
instant its command would be refused as expired anyway. A damaged file fails closed (docs/mqtt.md, "Signed
commands"). One instance per publisher, used by the commands thread only."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import IO, Optional

from appliance.durable import write_file_durably

log = logging.getLogger(__name__)

_NONCE = re.compile(r"^[0-9a-f]{32,64}$")  # as authz.py accepts them
_RESET = re.compile(r"^reset-([0-9]{1,15})$")
_COMPACT_AT = 1024  # lines in the file before dead ones are worth a rewrite


class NonceStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._expiry: dict[str, int] = {}
        self._lines = 0
        self._file: Optional[IO[str]] = None
        self._reset: Optional[tuple[int, int]] = None  # (reset_ms, expires_ms) of the reset mark

    @property
    def reset_ms(self) -> Optional[int]:
        """When the store was last reset after damage, while that still matters (else None)."""
        return self._reset[0] if self._reset is not None else None

    def open(self, now_ms: int, window_ms: int) -> None:
        """Read the file (missing: empty), drop expired nonces, rewrite it compacted and open it for appending.
        ``window_ms``: how long a command stays valid (max age + clock skew), the life of a reset mark."""
        self._expiry, self._reset = {}, None
        try:
            text = self.path.read_text("utf-8", errors="replace")
        except FileNotFoundError:
            text = ""
        lines = text.split("\n")[:-1]  # what follows the last newline is a torn write (or nothing)
        damaged = next((n for n, line in enumerate(lines, 1) if not self._read_line(line, now_ms)), None)
        if damaged is not None:
            self._set_aside(damaged, now_ms, window_ms)
        self._rewrite()

    def _read_line(self, line: str, now_ms: int) -> bool:
        """Take one line in; False when it is not a line this store writes."""
        expires, _, token = line.partition(" ")
        if not expires.isdigit() or len(expires) > 15:
            return False
        reset = _RESET.match(token)
        if reset is None and not _NONCE.match(token):
            return False
        if int(expires) > now_ms:
            if reset is not None:
                self._reset = (int(reset.group(1)), int(expires))
            else:
                self._expiry[token] = max(int(expires), self._expiry.get(token, 0))
        return True

    def _set_aside(self, line: int, now_ms: int, window_ms: int) -> None:
        kept = self.path.with_name(f"{self.path.name}.damaged-{now_ms}")
        os.replace(self.path, kept)
        self._expiry, self._reset = {}, (now_ms, now_ms + window_ms)
        log.error("MQTT command nonces: %s is damaged (line %d is not '<expires_ms> <nonce>'); kept as %s. Nonces "
                  "it held are lost, so every signed command issued before now (%d ms) is refused as replayed "
                  "until %d ms; commands issued from now on run as usual", self.path, line, kept, now_ms,
                  now_ms + window_ms)

    def seen(self, nonce: str, now_ms: int) -> bool:
        expires = self._expiry.get(nonce)
        return expires is not None and expires > now_ms

    def add(self, nonce: str, expires_ms: int, now_ms: int) -> None:
        """Record ``nonce`` durably (returns once it is on disk); open() first."""
        if self._file is None:
            raise RuntimeError("NonceStore.add before open")
        self._expiry[nonce] = expires_ms
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
        if self._reset is not None and self._reset[1] <= now_ms:
            self._reset = None
        return len(self._expiry)

    def _rewrite(self) -> None:
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mark = f"{self._reset[1]} reset-{self._reset[0]}\n" if self._reset is not None else ""
        write_file_durably(self.path, (mark + "".join(f"{e} {n}\n" for n, e in self._expiry.items())).encode())
        self._file = open(self.path, "a", encoding="utf-8")
        self._lines = len(self._expiry) + (self._reset is not None)
