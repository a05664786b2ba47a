"""The spool's ``set_aside`` table: messages the broker would not take, kept on disk but out of the queue so
that they cannot block the messages behind them, listed and moved back on request (``appliance spool``).

These run inside the caller's transaction, under the :class:`~appliance.mqtt.spool.Spool`'s lock, which
keeps its counters; they only speak SQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from appliance.mqtt.spooldb import INSERT


@dataclass(frozen=True)
class SetAsideMessage:
    id: int
    topic: str
    payload: bytes
    qos: int
    created: float  # when it was first spooled
    set_at: float   # when it was set aside
    reason: str


def move_out(db: sqlite3.Connection, row_id: int, now: float, reason: str) -> int | None:
    """Move queue row ``row_id`` to the set_aside table; returns its size, None if it is not in the queue."""
    moved = db.execute("INSERT INTO set_aside SELECT id, topic, payload, qos, created, size, ?, ? "
                       "FROM spool WHERE id = ?", (now, reason, row_id)).rowcount
    size = db.execute("DELETE FROM spool WHERE id = ? RETURNING size", (row_id,)).fetchall()
    if not moved:
        return None
    return int(size[0][0]) if size else 0


def read_all(db: sqlite3.Connection) -> list[SetAsideMessage]:
    rows = db.execute("SELECT id, topic, payload, qos, created, set_at, reason FROM set_aside "
                      "ORDER BY id").fetchall()
    return [SetAsideMessage(r[0], r[1], bytes(r[2]), r[3], r[4], r[5], r[6]) for r in rows]


def read_shared(path: str) -> list[SetAsideMessage]:
    """:func:`read_all` through a read-only connection of its own, beside the process that holds the spool (the
    WAL lets a reader see its last commit without taking its lock); sqlite3.Error when it cannot be read."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        return read_all(db)
    finally:
        db.close()


def select(db: sqlite3.Connection, ids: Sequence[int] | None) -> list[tuple[int, str, bytes, int, int]]:
    """``(id, topic, payload, qos, size)`` of every set-aside message, or of those in ``ids``, oldest first."""
    query = "SELECT id, topic, payload, qos, size FROM set_aside"
    params: tuple[int, ...] = ()
    if ids is not None:
        query += f" WHERE id IN ({','.join('?' * len(ids))})"
        params = tuple(int(i) for i in ids)
    return db.execute(query + " ORDER BY id", params).fetchall()


def move_back(db: sqlite3.Connection, rows: Sequence[tuple[int, str, bytes, int, int]], now: float) -> int:
    """Append ``rows`` (from :func:`select`) to the queue in their order, stamped ``now``, and delete them from
    set_aside; returns the last queue id given (0 for no rows)."""
    last = 0
    for row_id, topic, payload, qos, size in rows:
        cur = db.execute(INSERT, (topic, payload, qos, now, size))
        last = cur.lastrowid or last
        db.execute("DELETE FROM set_aside WHERE id = ?", (row_id,))
    return last
