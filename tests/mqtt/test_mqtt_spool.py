"""The SQLite spool on its own: durability across reopen and SIGKILL, order, bounds and overflow policies, age
limit, corrupt files, concurrent users."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.wait import wait_until

from appliance.mqtt.config import SpoolConfig
from appliance.mqtt.errors import SpoolError
from appliance.mqtt.spool import Spool, SpoolRecord

KB = 1024


def rec(i: int, size: int = 1000) -> SpoolRecord:
    topic = f"plant/dev1/cam{i % 4}/detections"
    return SpoolRecord(topic, f"{i:08d}".encode().ljust(size - len(topic), b"x"), 1)


def seq_of(payload: bytes) -> int:
    return int(payload[:8])


def make(path: Path, clock: list[float] | None = None, **cfg: object) -> Spool:
    config = SpoolConfig.model_validate({"max_bytes": 64 * KB, **cfg})
    spool = Spool(path, config, clock=(lambda: clock[0]) if clock else time.time)
    spool.open()
    return spool


def test_messages_survive_reopen_in_order_and_ids_never_repeat(tmp_path: Path) -> None:
    path = tmp_path / "state" / "spool.sqlite3"  # parent created on open
    spool = make(path)
    assert spool.append([rec(i) for i in range(5)]) == 5
    spool.close()
    spool = make(path)
    rows = spool.read_after(0, 100)
    assert [seq_of(r.payload) for r in rows] == [0, 1, 2, 3, 4]
    assert spool.stats().backlog == 5 and spool.stats().bytes == 5000
    assert [seq_of(r.payload) for r in spool.read_after(rows[1].id, 2)] == [2, 3]
    assert spool.delete([r.id for r in rows]) == 5
    assert spool.delete([rows[0].id]) == 0  # already gone: ignored
    spool.append([rec(9)])
    (again,) = spool.read_after(0, 10)
    assert again.id > rows[-1].id  # a replay cursor never skips or repeats after the spool empties
    spool.close()


def test_committed_appends_survive_sigkill_of_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite3"
    script = textwrap.dedent(f"""
        import sys
        from appliance.mqtt.config import SpoolConfig
        from appliance.mqtt.spool import Spool, SpoolRecord
        s = Spool({str(path)!r}, SpoolConfig())
        s.open()
        i = 0
        while True:
            s.append([SpoolRecord("t/cam0/detections", b"%08d" % i, 1)])
            print(i, flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        acknowledged = -1
        assert proc.stdout is not None
        for line in proc.stdout:
            acknowledged = int(line)
            if acknowledged >= 2000:
                break
        proc.kill()  # SIGKILL between two appends, or in the middle of one
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    spool = make(path)
    stored = [int(r.payload) for r in spool.read_after(0, 100000)]
    spool.close()
    assert stored[: acknowledged + 1] == list(range(acknowledged + 1))  # every acknowledged append is there
    assert stored == list(range(len(stored)))  # and nothing half-written or out of order


def test_drop_oldest_keeps_the_newest_and_counts(tmp_path: Path) -> None:
    spool = make(tmp_path / "s.db", overflow="drop_oldest")
    for i in range(100):
        assert spool.append([rec(i)]) == 1
    stats = spool.stats()
    kept = stats.backlog
    assert kept == 65  # 64 KiB / 1000 B
    assert stats.bytes <= 64 * KB and stats.dropped_oldest == 100 - kept and stats.dropped_newest == 0
    assert [seq_of(r.payload) for r in spool.read_after(0, 1000)] == list(range(100 - kept, 100))
    spool.close()


def test_drop_newest_refuses_and_counts(tmp_path: Path) -> None:
    spool = make(tmp_path / "s.db", overflow="drop_newest")
    kept = sum(spool.append([rec(i)]) for i in range(100))
    stats = spool.stats()
    assert kept == stats.backlog == 65 and stats.dropped_newest == 35 and stats.dropped_oldest == 0
    assert [seq_of(r.payload) for r in spool.read_after(0, 1000)] == list(range(65))
    # a batch is kept up to the bound
    spool.delete([r.id for r in spool.read_after(0, 3)])
    assert spool.append([rec(200 + i) for i in range(5)]) == 3
    assert spool.stats().dropped_newest == 37
    spool.close()


def test_block_waits_for_acks_then_keeps_the_message(tmp_path: Path) -> None:
    spool = make(tmp_path / "s.db", overflow="block", block_timeout_s=60)
    for i in range(65):
        spool.append([rec(i)])
    result: list[int] = []
    writer = threading.Thread(target=lambda: result.append(spool.append([rec(999)])))
    writer.start()
    wait_until(lambda: spool.blocked, 30, 0.01, "the writer to block")
    assert spool.blocked == 1 and result == []  # waiting, not refused
    oldest = spool.read_after(0, 2)
    spool.delete([r.id for r in oldest])  # the broker acknowledged two: room for the blocked one
    writer.join(60)
    assert result == [1]
    stats = spool.stats()
    assert stats.dropped_newest == 0 and stats.dropped_oldest == 0
    assert seq_of(spool.read_after(0, 1000)[-1].payload) == 999
    spool.close()


def test_block_gives_up_after_its_timeout_and_counts(tmp_path: Path) -> None:
    spool = make(tmp_path / "s.db", overflow="block", block_timeout_s=0.2)
    kept = sum(spool.append([rec(i)]) for i in range(66))
    assert kept == 65 and spool.stats().dropped_newest == 1
    spool.close()


def test_oversized_message_is_refused_under_every_policy(tmp_path: Path) -> None:
    for policy in ("drop_oldest", "drop_newest", "block"):
        spool = make(tmp_path / f"{policy}.db", overflow=policy, block_timeout_s=0)
        spool.append([rec(1)])
        assert spool.append([rec(2, size=65 * KB)]) == 0
        stats = spool.stats()
        assert stats.dropped_newest == 1 and stats.backlog == 1, policy  # the queued one is not sacrificed
        spool.close()


def test_old_messages_expire_and_are_counted(tmp_path: Path) -> None:
    now = [1_000_000.0]
    spool = make(tmp_path / "s.db", clock=now, max_age_s=3600)
    spool.append([rec(i) for i in range(3)])
    now[0] += 1800
    spool.append([rec(i) for i in range(3, 5)])
    assert spool.expire() == 0
    now[0] += 1801  # the first three are now older than an hour
    assert spool.expire() == 3
    assert [seq_of(r.payload) for r in spool.read_after(0, 10)] == [3, 4]
    stats = spool.stats()
    assert stats.dropped_expired == 3 and stats.backlog == 2 and stats.bytes == 2000
    spool.close()


def test_corrupt_spool_is_moved_aside_and_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spool.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    spool = make(path)
    assert spool.stats().quarantined == 1 and spool.stats().backlog == 0
    assert spool.append([rec(1)]) == 1
    spool.close()
    aside = list(tmp_path.glob("spool.sqlite3.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not")
    assert "unreadable" in caplog.text and "moved it to" in caplog.text


def test_second_user_of_a_spool_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite3"
    first = make(path)
    second = Spool(path, SpoolConfig())
    with pytest.raises(SpoolError, match="in use by another process"):
        second.open()
    first.close()
    second.open()  # free again once the first one closed
    second.close()


def test_spool_from_newer_software_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite3"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(SpoolError, match="format 99, newer than this software"):
        make(path)


def test_use_before_open_is_an_error(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.db", SpoolConfig())
    with pytest.raises(SpoolError, match="not open"):
        spool.append([rec(1)])
    with pytest.raises(SpoolError, match="not open"):
        spool.read_after(0, 1)


def test_unwritable_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SpoolError, match="cannot create the spool directory"):
        make(blocker / "sub" / "spool.sqlite3")


def test_set_aside_moves_one_message_out_of_the_queue_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite3"
    spool = make(path, clock=[1000.0])
    spool.append([rec(i) for i in range(3)])
    before = spool.stats()
    assert spool.set_aside(2, "broker closed the connection 5 times") is True
    assert spool.set_aside(2, "again") is False and spool.set_aside(99, "unknown") is False
    stats = spool.stats()
    assert stats.backlog == 2 and stats.set_aside == 1 and stats.bytes == before.bytes - 1000
    assert [seq_of(m.payload) for m in spool.read_after(0, 10)] == [0, 2]
    spool.close()
    reopened = make(path)  # the queue and the set-aside row both survive a restart
    assert [seq_of(m.payload) for m in reopened.read_after(0, 10)] == [0, 2]
    reopened.close()
    with sqlite3.connect(str(path)) as db:
        rows = db.execute("SELECT id, payload, set_at, reason FROM set_aside").fetchall()
    assert [(r[0], seq_of(bytes(r[1])), r[2], r[3]) for r in rows] == [
        (2, 1, 1000.0, "broker closed the connection 5 times")]


def test_set_aside_messages_are_listed_and_requeued_at_the_end_in_their_order(tmp_path: Path) -> None:
    clock = [1000.0]
    spool = make(tmp_path / "spool.sqlite3", clock=clock)
    spool.append([rec(i) for i in range(5)])
    for row_id, reason in ((2, "acl"), (4, "too big")):
        assert spool.set_aside(row_id, reason)
    listed = spool.set_aside_messages()
    assert [(m.id, seq_of(m.payload), m.reason, m.set_at) for m in listed] == [(2, 1, "acl", 1000.0),
                                                                             (4, 3, "too big", 1000.0)]
    clock[0] = 5000.0
    assert spool.requeue_set_aside([4]) == 1
    queue = spool.read_after(0, 10)
    assert [seq_of(m.payload) for m in queue] == [0, 2, 4, 3]  # after everything queued, with a new id
    assert queue[-1].id > 5 and queue[-1].created == 5000.0  # its age restarts: max_age_s does not drop it
    assert spool.requeue_set_aside() == 1 and spool.set_aside_messages() == []
    assert [seq_of(m.payload) for m in spool.read_after(queue[-1].id, 10)] == [1]
    assert spool.stats().backlog == 5 and spool.stats().bytes == 5000
    assert spool.requeue_set_aside() == 0
    spool.close()


def test_requeue_that_would_overflow_the_spool_moves_nothing(tmp_path: Path) -> None:
    spool = make(tmp_path / "spool.sqlite3", max_bytes=64 * KB)
    spool.append([rec(i) for i in range(3)])
    assert spool.set_aside(1, "acl")
    spool.append([rec(i) for i in range(10, 73)])  # 65 messages of 1000 bytes: no room for one more
    with pytest.raises(SpoolError, match="would exceed spool.max_bytes"):
        spool.requeue_set_aside()
    assert [m.id for m in spool.set_aside_messages()] == [1]
    assert spool.stats().backlog == 65
    spool.close()


def _add_trigger(path: Path, sql: str) -> None:
    # A second connection plants a trigger that makes SQLite itself refuse a statement inside the spool's
    # transaction: a real failure half-way through, no mock.
    db = sqlite3.connect(str(path), isolation_level=None)
    try:
        db.execute(sql)
    finally:
        db.close()


def test_a_write_failing_half_way_rolls_back_all_of_it_and_the_spool_stays_usable(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite3"
    spool = make(path)
    spool.append([rec(i) for i in range(3)])
    _add_trigger(path, "CREATE TRIGGER poison BEFORE INSERT ON spool WHEN NEW.topic = 't/poison' "
                       "BEGIN SELECT RAISE(ABORT, 'poisoned'); END")
    batch = [rec(10), rec(11), SpoolRecord("t/poison", b"x", 1)]
    with pytest.raises(SpoolError, match="cannot write to the spool: poisoned"):
        spool.append(batch)
    assert spool.stats().backlog == 3 and spool.stats().bytes == 3000  # the two before the poison are gone too
    assert [seq_of(m.payload) for m in spool.read_after(0, 10)] == [0, 1, 2]
    _add_trigger(path, "CREATE TRIGGER keep BEFORE DELETE ON spool WHEN OLD.id = 2 "
                       "BEGIN SELECT RAISE(ABORT, 'kept'); END")
    with pytest.raises(SpoolError, match="cannot delete acknowledged messages: kept"):
        spool.delete([1, 2])
    assert [m.id for m in spool.read_after(0, 10)] == [1, 2, 3]  # id 1 came back with the rollback
    assert spool.append([rec(12), rec(13)]) == 2  # no transaction was left open
    assert spool.delete([1, 3]) == 2
    assert spool.stats().backlog == 3 and spool.stats().bytes == 3000
    spool.close()
