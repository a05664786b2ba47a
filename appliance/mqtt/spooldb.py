"""The spool's SQLite file: its schema and format version, the WAL and ``synchronous`` settings that make a
committed append durable, the lock file that keeps a second process off it, and moving an unreadable file aside.
The queue over it is :mod:`appliance.mqtt.spool`."""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from pathlib import Path

from appliance.mqtt.errors import SpoolError, SpoolInUse

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
INSERT = "INSERT INTO spool (topic, payload, qos, created, size) VALUES (?, ?, ?, ?, ?)"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    topic   TEXT    NOT NULL,
    payload BLOB    NOT NULL,
    qos     INTEGER NOT NULL,
    created REAL    NOT NULL,
    size    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS set_aside (
    id       INTEGER PRIMARY KEY,
    topic    TEXT    NOT NULL,
    payload  BLOB    NOT NULL,
    qos      INTEGER NOT NULL,
    created  REAL    NOT NULL,
    size     INTEGER NOT NULL,
    set_at   REAL    NOT NULL,
    reason   TEXT    NOT NULL
)"""


def take_process_lock(path: Path) -> int:
    """Lock ``<path>.lock`` for this process (its pid written in it); returns the fd that holds the lock."""
    # Two publishers on one spool would both replay it; refuse the second one clearly.
    lock_path = str(path) + ".lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise SpoolError(f"cannot create the spool lock file {lock_path}: {exc}", str(path)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise SpoolInUse(holder, str(path)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def connect(path: Path, synchronous: str) -> tuple[sqlite3.Connection, int, int, int]:
    """Open (creating or upgrading) the spool in WAL mode; returns the connection and the queue's message count,
    bytes and highest id. A file SQLite cannot read raises ``sqlite3.DatabaseError`` (see :func:`quarantine`)."""
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > FORMAT_VERSION:
            raise SpoolError(f"the spool has format {version}, newer than this software's {FORMAT_VERSION}; "
                             "upgrade, or move the file aside", str(path))
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise SpoolError(f"SQLite refused WAL mode (got {mode!r}); is the file system read-only?", str(path))
        db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        db.execute("PRAGMA journal_size_limit=67108864")
        db.executescript(_SCHEMA)
        db.execute(f"PRAGMA user_version={FORMAT_VERSION}")
        count, size, last = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(MAX(id), 0) FROM spool").fetchone()
    except BaseException:
        db.close()
        raise
    return db, int(count), int(size), int(last)


def quarantine(path: Path, now: float, exc: Exception) -> Path:
    """Move an unreadable spool (and its -wal, -shm) to ``<name>.corrupt-<UTC time>``; returns where."""
    # A corrupt spool must not stop the appliance from publishing new detections: keep the file for a
    # post-mortem and start an empty one. Loud, because its messages are lost.
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(path) + suffix)
        if src.exists():
            os.replace(src, Path(str(target) + suffix))
    log.error("MQTT spool %s is unreadable (%s); moved it to %s and started an empty spool. Messages in it "
              "were not published.", path, exc, target)
    return target
