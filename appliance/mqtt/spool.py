"""Durable on-disk queue of messages awaiting a broker acknowledgement (SQLite in WAL mode).

``append`` returns only once its transaction has committed; rows leave only through ``delete`` (on PUBACK), the
overflow policy, the age bound or ``set_aside``, each drop counted; ids only grow, so reading "after id N" replays
in insertion order, across restarts too (docs/mqtt.md, "Delivery guarantees"). The file itself is
:mod:`appliance.mqtt.spooldb`, the ``set_aside`` table's SQL :mod:`appliance.mqtt.setaside`."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

from appliance.mqtt import setaside, spooldb
from appliance.mqtt.config import SpoolConfig
from appliance.mqtt.errors import SpoolError
from appliance.mqtt.setaside import SetAsideMessage

log = logging.getLogger(__name__)

_DELETE_CHUNK = 500  # stays under SQLite's bound-parameter limit on old builds (999)


@dataclass(frozen=True)
class SpoolRecord:
    topic: str
    payload: bytes
    qos: int

    @property
    def size(self) -> int:
        return len(self.payload) + len(self.topic.encode("utf-8"))


@dataclass(frozen=True)
class SpooledMessage:
    id: int
    topic: str
    payload: bytes
    qos: int
    created: float


@dataclass(frozen=True)
class SpoolStats:
    backlog: int
    bytes: int
    max_bytes: int
    spooled: int
    dropped_oldest: int
    dropped_newest: int
    dropped_expired: int
    quarantined: int     # unreadable spool files moved aside at open
    set_aside: int       # messages moved to the set_aside table this run (see Spool.set_aside)


class Spool:
    """``clock`` gives wall-clock epoch seconds; it stamps rows for the age bound (it must survive restarts).

    One connection, serialized by a lock: the producers' inserts, the sender's reads and the ack deletes are all
    short, and SQLite would serialize the writers anyway."""

    def __init__(self, path: Path, config: SpoolConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._config = config
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._db: Optional[sqlite3.Connection] = None
        self._lock_fd: Optional[int] = None
        self._count = 0
        self._bytes = 0
        self._spooled = 0
        self._dropped_oldest = 0
        self._dropped_newest = 0
        self._dropped_expired = 0
        self._quarantined = 0
        self._set_aside = 0
        self._blocked = 0
        self._last_id = 0
        self._last_drop_log = float("-inf")

    # -- lifecycle -----------------------------------------------------------------------------------------

    def open(self) -> None:
        with self._cond:
            if self._db is not None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SpoolError(f"cannot create the spool directory: {exc}", str(self.path)) from exc
            self._lock_fd = spooldb.take_process_lock(self.path)
            try:
                try:
                    self._db = self._connect()
                except sqlite3.DatabaseError as exc:
                    spooldb.quarantine(self.path, self._clock(), exc)
                    self._quarantined += 1
                    self._db = self._connect()
            except (sqlite3.Error, OSError) as exc:
                self._release_process_lock()
                raise SpoolError(f"cannot open the spool: {exc}", str(self.path)) from exc
            if self._count:
                log.info("MQTT spool %s holds %d messages (%d bytes) from before; they will be replayed first",
                         self.path, self._count, self._bytes)

    def close(self) -> None:
        with self._cond:
            if self._db is not None:
                try:
                    self._db.close()
                finally:
                    self._db = None
                    self._release_process_lock()
            self._cond.notify_all()

    def _release_process_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def _connect(self) -> sqlite3.Connection:
        db, self._count, self._bytes, self._last_id = spooldb.connect(self.path, self._config.synchronous)
        return db

    def _require_open(self) -> sqlite3.Connection:
        if self._db is None:
            raise SpoolError("the spool is not open", str(self.path))
        return self._db

    # -- producers -----------------------------------------------------------------------------------------

    def append(self, records: Sequence[SpoolRecord]) -> int:
        """Commit ``records`` in one transaction, applying the overflow policy; returns how many were kept."""
        if not records:
            return 0
        sizes = [r.size for r in records]
        cfg = self._config
        with self._cond:
            db = self._require_open()
            if cfg.overflow == "block":
                self._wait_for_room(sum(sizes))
            db = self._require_open()  # stop() may have closed it while we waited
            kept = 0
            refused = 0
            now = self._clock()
            if len(records) == 1 and self._bytes + sizes[0] <= cfg.max_bytes:
                # The common case: one autocommit INSERT is one transaction, a third of BEGIN/INSERT/COMMIT.
                record = records[0]
                try:
                    cur = db.execute(spooldb.INSERT, (record.topic, record.payload, record.qos, now, sizes[0]))
                    self._last_id = cur.lastrowid or self._last_id
                except sqlite3.Error as exc:
                    raise SpoolError(f"cannot write to the spool: {exc}", str(self.path)) from exc
                self._bytes += sizes[0]
                self._count += 1
                self._spooled += 1
                return 1
            with self._transaction(db, "write to the spool"):
                for record, size in zip(records, sizes):
                    if self._bytes + size > cfg.max_bytes:
                        if cfg.overflow == "drop_oldest" and size <= cfg.max_bytes:
                            self._drop_oldest(db, self._bytes + size - cfg.max_bytes)
                        else:
                            refused += 1
                            continue
                    cur = db.execute(spooldb.INSERT, (record.topic, record.payload, record.qos, now, size))
                    self._last_id = cur.lastrowid or self._last_id
                    self._bytes += size
                    self._count += 1
                    kept += 1
            self._spooled += kept
            if refused:
                self._dropped_newest += refused
                self._log_drop("refused %d new message(s)", refused)
            return kept

    def _wait_for_room(self, need: int) -> None:
        if need > self._config.max_bytes:
            return
        deadline = time.monotonic() + self._config.block_timeout_s
        self._blocked += 1
        try:
            while self._db is not None and self._bytes + need > self._config.max_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)
        finally:
            self._blocked -= 1

    def _drop_oldest(self, db: sqlite3.Connection, need_free: int) -> None:
        freed = dropped = 0
        while freed < need_free:
            rows = db.execute("SELECT id, size FROM spool ORDER BY id LIMIT 256").fetchall()
            if not rows:
                break
            cut = rows[0][0]
            for row_id, size in rows:
                freed += size
                dropped += 1
                cut = row_id
                if freed >= need_free:
                    break
            db.execute("DELETE FROM spool WHERE id <= ?", (cut,))
        self._bytes -= freed
        self._count -= dropped
        self._dropped_oldest += dropped
        if dropped:
            self._log_drop("dropped the %d oldest message(s)", dropped)

    def _log_drop(self, what: str, n: int) -> None:
        now = time.monotonic()
        if now - self._last_drop_log >= 10.0:  # at most one line per 10 s, with totals, not one per message
            self._last_drop_log = now
            log.warning("MQTT spool %s is full (%d of %d bytes, policy %s): " + what + "; totals: %d oldest, "
                        "%d newest, %d expired dropped. Is the broker reachable?", self.path, self._bytes,
                        self._config.max_bytes, self._config.overflow, n, self._dropped_oldest,
                        self._dropped_newest, self._dropped_expired)

    @contextmanager
    def _transaction(self, db: sqlite3.Connection, action: str) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` around the block. A SQLite error (in the block or at COMMIT) rolls
        back, reloads the counters and is raised as ``SpoolError("cannot <action>: ...")``; any other exception
        rolls back the same way and propagates as it is, so the connection is never left inside a transaction.
        Durability is COMMIT's under the connection's ``synchronous`` setting."""
        try:
            db.execute("BEGIN IMMEDIATE")
            yield
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(db)
            raise SpoolError(f"cannot {action}: {exc}", str(self.path)) from exc
        except BaseException:
            self._rollback(db)
            raise

    def _rollback(self, db: sqlite3.Connection) -> None:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # no transaction was open; the counters below are reloaded either way
        try:
            count, size = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM spool").fetchone()
            self._count, self._bytes = int(count), int(size)
        except sqlite3.Error as exc:
            log.error("MQTT spool %s: cannot reload counters after a failed write: %s", self.path, exc)

    # -- sender --------------------------------------------------------------------------------------------

    def read_after(self, after_id: int, limit: int) -> list[SpooledMessage]:
        with self._cond:
            db = self._require_open()
            rows = db.execute("SELECT id, topic, payload, qos, created FROM spool WHERE id > ? ORDER BY id LIMIT ?",
                              (after_id, limit)).fetchall()
        return [SpooledMessage(r[0], r[1], bytes(r[2]), r[3], r[4]) for r in rows]

    def delete(self, ids: Iterable[int]) -> int:
        """Remove acknowledged messages; ids already gone (dropped by policy) are ignored."""
        id_list = list(ids)
        if not id_list:
            return 0
        with self._cond:
            db = self._require_open()
            freed = removed = 0
            with self._transaction(db, "delete acknowledged messages"):
                for i in range(0, len(id_list), _DELETE_CHUNK):
                    chunk = id_list[i:i + _DELETE_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    sizes = db.execute(f"DELETE FROM spool WHERE id IN ({marks}) RETURNING size", chunk).fetchall()
                    removed += len(sizes)
                    freed += sum(s[0] for s in sizes)
            self._count -= removed
            self._bytes -= freed
            self._cond.notify_all()
            return removed

    def set_aside(self, row_id: int, reason: str) -> bool:
        """Move one message from the queue to the ``set_aside`` table (kept, never sent again automatically), so
        that a message the broker keeps refusing cannot block the messages behind it. False if it is gone."""
        with self._cond:
            db = self._require_open()
            with self._transaction(db, f"set aside message {row_id}"):
                size = setaside.move_out(db, row_id, self._clock(), reason)
            if size is None:
                return False
            self._count -= 1
            self._bytes -= size
            self._set_aside += 1
            self._cond.notify_all()
            return True

    def set_aside_messages(self) -> list[SetAsideMessage]:
        """Every message in the ``set_aside`` table, oldest first."""
        with self._cond:
            return setaside.read_all(self._require_open())

    def requeue_set_aside(self, ids: Sequence[int] | None = None) -> int:
        """Move set-aside messages (all of them, or ``ids``) back to the end of the queue, in their original
        order, for the publisher to send again (e.g. after the broker's ACL was fixed); one the broker still
        refuses is set aside again. Their age restarts now, so max_age_s does not drop them at once. All or
        nothing: refused when they would not fit in max_bytes. Returns how many moved."""
        with self._cond:
            db = self._require_open()
            if ids is not None and not ids:
                return 0
            with self._transaction(db, "requeue set-aside messages"):
                rows = setaside.select(db, ids)
                total = sum(r[4] for r in rows)
                if self._bytes + total > self._config.max_bytes:
                    raise SpoolError(f"requeueing {len(rows)} set-aside message(s) ({total} bytes) would exceed "
                                     f"spool.max_bytes ({self._bytes} of {self._config.max_bytes} used)",
                                     str(self.path))
                self._last_id = setaside.move_back(db, rows, self._clock()) or self._last_id
            self._count += len(rows)
            self._bytes += total
            self._cond.notify_all()
            return len(rows)

    def expire(self) -> int:
        """Drop messages older than max_age_s (oldest first); returns how many."""
        cutoff = self._clock() - self._config.max_age_s
        with self._cond:
            db = self._require_open()
            oldest = db.execute("SELECT created FROM spool ORDER BY id LIMIT 1").fetchone()
            if oldest is None or oldest[0] >= cutoff:
                return 0
            freed = removed = 0
            with self._transaction(db, "expire old messages"):
                while True:
                    rows = db.execute("SELECT id, size, created FROM spool ORDER BY id LIMIT 512").fetchall()
                    # Rows are in time order unless the wall clock stepped back; stop at the first young one.
                    prefix = []
                    for r in rows:
                        if r[2] >= cutoff:
                            break
                        prefix.append(r)
                    if not prefix:
                        break
                    db.execute("DELETE FROM spool WHERE id <= ?", (prefix[-1][0],))
                    removed += len(prefix)
                    freed += sum(r[1] for r in prefix)
                    if len(prefix) < len(rows):
                        break
            self._count -= removed
            self._bytes -= freed
            self._dropped_expired += removed
            self._cond.notify_all()
        if removed:
            log.warning("MQTT spool %s: dropped %d message(s) older than max_age_s=%s", self.path, removed,
                        self._config.max_age_s)
        return removed

    @property
    def last_id(self) -> int:
        """Id of the newest message ever appended (lock-free read: an int attribute)."""
        return self._last_id

    @property
    def blocked(self) -> int:
        """Producers waiting for room under the 'block' policy right now."""
        with self._cond:
            return self._blocked

    def stats(self) -> SpoolStats:
        with self._cond:
            return SpoolStats(self._count, self._bytes, self._config.max_bytes, self._spooled, self._dropped_oldest,
                              self._dropped_newest, self._dropped_expired, self._quarantined,
                              self._set_aside)
