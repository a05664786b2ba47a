"""Logging to journald when running under systemd, to stderr otherwise; JSON lines when asked (a container).

Under systemd the journal gets structured entries through its native protocol (no systemd-python needed):
PRIORITY from the level, the logger, the code location, and the fields CAMERA, MODEL and STAGE when a log
call passes them (``log.info(..., extra={"camera": "line1"})``), so operators can filter with
``journalctl -u appliance CAMERA=line1``.

Capture processes configure logging through the same :func:`configure` with ``camera=``: every record they log
carries CAMERA (whichever module logged it), and warnings reach the journal at priority 4, not as stderr lines
that journald stamps 6. ``APPLIANCE_LOG_FORMAT=json`` (or ``--log-format json``) writes one JSON object per line
to stderr instead, with the same fields, for a container's log collector. Repeated warnings are summarized
(``RepeatLimiter``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

JOURNAL_SOCKET = Path("/run/systemd/journal/socket")
STRUCTURED = ("camera", "model", "stage")
LOG_FORMAT_ENV = "APPLIANCE_LOG_FORMAT"
LOG_FORMATS = ["text", "json"]
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


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the structured fields it carries
    (camera, model, stage), the process, and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for key in STRUCTURED:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = str(value)
        entry["process"] = record.processName if record.processName != "MainProcess" else "appliance"
        entry["pid"] = record.process
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def log_format(environ: Mapping[str, str] | None = None) -> str:
    """``text`` or ``json``, from APPLIANCE_LOG_FORMAT; an unknown value is an error, not silently text."""
    value = (os.environ if environ is None else environ).get(LOG_FORMAT_ENV, "text") or "text"
    if value not in LOG_FORMATS:
        raise ValueError(f"{LOG_FORMAT_ENV}={value!r}: use one of {', '.join(LOG_FORMATS)}")
    return value


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
    """Log to the journal under systemd, to stderr otherwise, as JSON lines when APPLIANCE_LOG_FORMAT is json.
    ``camera``: this process works for one camera (a capture process): every record gets CAMERA, and stderr
    lines say ``capture[<camera>]``."""
    root = logging.getLogger()
    root.setLevel(level)
    for old in list(root.handlers):
        root.removeHandler(old)
    if log_format(environ) == "json":  # asked for by name, so it wins over the journal
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
    elif use_journal(environ, journal_path):
        handler = JournalHandler(journal_path)
        handler.setFormatter(logging.Formatter("%(message)s"))  # journald stamps time and level itself
    else:
        handler = logging.StreamHandler(sys.stderr)
        origin = "capture[%(camera)s]" if camera is not None else "%(name)s"
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {origin}: %(message)s"))
    if camera is not None:
        handler.addFilter(DefaultFields(camera=camera))
    RepeatLimiter().attach(handler)  # after the fields, so its summaries carry them
    root.addHandler(handler)


AUDIT = {"audit": True}  # ``log.warning(..., extra=AUDIT)``: never summarized (RepeatLimiter)
WINDOW_S = 60.0
BURST = 3  # lines of one kind a window before the rest are counted


@dataclass
class _Run:
    start: float
    passed: int = 0
    suppressed: int = 0
    last: logging.LogRecord | None = None


class RepeatLimiter(logging.Filter):
    """One log line per change, not per event: the same warning from the same place (logger, file, line) passes
    ``burst`` times a window; the rest are counted and summarized once the window ends ("... (and 998 more like
    it in the last 60 s)"), with the next record that reaches the handler or by a timer at the window's end.
    INFO and DEBUG are never limited, nor a record logged with ``extra=AUDIT`` (a security line a tool like
    fail2ban reads one by one, and that its source already bounds). ``attach(handler)`` adds it to the handler it
    emits its summaries through."""

    def __init__(self, window_s: float = WINDOW_S, burst: int = BURST, clock: Callable[[], float] = time.monotonic,
                 schedule: Callable[[float, Callable[[], None]], None] | None = None) -> None:
        """``schedule(delay_s, call)``: runs ``call`` later (default: a daemon timer thread)."""
        super().__init__()
        self._window_s, self._burst, self._clock = window_s, burst, clock
        self._schedule = schedule or _later
        self._runs: dict[tuple[str, str, int], _Run] = {}
        self._lock = threading.Lock()
        self._handler: logging.Handler | None = None

    def attach(self, handler: logging.Handler) -> None:
        self._handler = handler
        handler.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "repeat_summary", False) or getattr(record, "audit", False) \
                or record.levelno < logging.WARNING:
            return True
        now = self._clock()
        key = (record.name, record.pathname, record.lineno)
        with self._lock:
            ended = self._ended(now)
            run = self._runs.setdefault(key, _Run(now))
            run.passed += 1
            keep = run.passed <= self._burst
            if not keep:
                run.suppressed += 1
                run.last = record
                if run.suppressed == 1:  # the summary goes out at the window's end even if nothing else is logged
                    self._schedule(run.start + self._window_s - now + 0.05, self.flush)
        self._emit(ended)
        return keep

    def flush(self) -> None:
        """Summarize the runs whose window has ended (and forget them)."""
        with self._lock:
            ended = self._ended(self._clock())
        self._emit(ended)

    def _ended(self, now: float) -> list[tuple[logging.LogRecord, int, float]]:
        """Under the lock: pop the runs past their window; those that suppressed lines, as summaries to emit."""
        done = [key for key, run in self._runs.items() if now - run.start >= self._window_s]
        summaries = []
        for key in done:
            run = self._runs.pop(key)
            if run.suppressed and run.last is not None:
                summaries.append((run.last, run.suppressed, now - run.start))
        return summaries

    def _emit(self, summaries: list[tuple[logging.LogRecord, int, float]]) -> None:
        if self._handler is None:
            return
        for last, count, span in summaries:
            text = f"{last.getMessage()} (and {count} more like it in the last {span:.0f} s)"
            self._handler.handle(logging.makeLogRecord({**last.__dict__, "msg": text, "args": None,
                                                        "exc_info": None, "exc_text": None,
                                                        "repeat_summary": True}))


def _later(delay_s: float, call: Callable[[], None]) -> None:
    timer = threading.Timer(max(0.0, delay_s), call)
    timer.daemon = True
    timer.start()
