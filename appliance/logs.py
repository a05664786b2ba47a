"""Logging to journald when running under systemd, to stderr otherwise.

Under systemd the journal gets structured entries through its native protocol (no systemd-python needed):
PRIORITY from the level, the logger, the code location, and the fields CAMERA, MODEL and STAGE when a log
call passes them (``log.info(..., extra={"camera": "line1"})``), so operators can filter with
``journalctl -u appliance CAMERA=line1``.

Capture processes configure logging through the same :func:`configure` with ``camera=``: every record they log
carries CAMERA (whichever module logged it), and warnings reach the journal at priority 4, not as stderr lines
that journald stamps 6.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys
from pathlib import Path
from typing import Mapping

JOURNAL_SOCKET = Path("/run/systemd/journal/socket")
STRUCTURED = ("camera", "model", "stage")
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


def _field(name: str, value: str) -> bytes:
    data = value.encode("utf-8", "replace")
    if b"\n" in data:  # the binary form: NAME\n, little-endian 64-bit length, data, \n
        return name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
    return name.encode() + b"=" + data + b"\n"


class JournalHandler(logging.Handler):
    def __init__(self, path: Path = JOURNAL_SOCKET, identifier: str = "appliance") -> None:
        super().__init__()
        self._path = str(path)
        self._identifier = identifier
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    def entry(self, record: logging.LogRecord) -> bytes:
        fields = {
            "MESSAGE": self.format(record),
            "PRIORITY": str(_PRIORITY.get(record.levelno, 6)),
            "SYSLOG_IDENTIFIER": self._identifier,
            "LOGGER": record.name,
            "CODE_FILE": record.pathname,
            "CODE_LINE": str(record.lineno),
            "CODE_FUNC": record.funcName,
        }
        for key in STRUCTURED:
            value = getattr(record, key, None)
            if value is not None:
                fields[key.upper()] = str(value)
        return b"".join(_field(k, v) for k, v in fields.items())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._sock.sendto(self.entry(record), self._path)
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        self._sock.close()
        super().close()


def use_journal(environ: Mapping[str, str] | None = None, path: Path = JOURNAL_SOCKET) -> bool:
    """systemd sets JOURNAL_STREAM when stderr goes to the journal; then log natively instead."""
    env = os.environ if environ is None else environ
    return bool(env.get("JOURNAL_STREAM")) and path.exists()


class DefaultFields(logging.Filter):
    """Sets structured fields (``camera=...``) on every record that does not carry its own."""

    def __init__(self, **fields: str) -> None:
        super().__init__()
        self._fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self._fields.items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True


def configure(level: str | int, environ: Mapping[str, str] | None = None, journal_path: Path = JOURNAL_SOCKET,
              *, camera: str | None = None) -> None:
    """Log to the journal under systemd, to stderr otherwise. ``camera``: this process works for one camera
    (a capture process): every record gets CAMERA, and stderr lines say ``capture[<camera>]``."""
    root = logging.getLogger()
    root.setLevel(level)
    for old in list(root.handlers):
        root.removeHandler(old)
    if use_journal(environ, journal_path):
        handler: logging.Handler = JournalHandler(journal_path)
        handler.setFormatter(logging.Formatter("%(message)s"))  # journald stamps time and level itself
    else:
        handler = logging.StreamHandler(sys.stderr)
        origin = "capture[%(camera)s]" if camera is not None else "%(name)s"
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {origin}: %(message)s"))
    if camera is not None:
        handler.addFilter(DefaultFields(camera=camera))
    root.addHandler(handler)
