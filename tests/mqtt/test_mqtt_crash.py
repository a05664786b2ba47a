"""A real publisher process killed with SIGKILL: the spool's backlog arrives after a restart, and the broker
publishes the last will."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from mqtt_helpers import make_config, seqs_by_camera, validate
from support.mosquitto import Mosquitto
from support.subscriber import Subscriber

CHILD = Path(__file__).with_name("mqtt_child_publisher.py")


class Child:
    """A publisher process; records which (camera, seq) it reported durable before it died."""

    def __init__(self, config_doc: dict[str, Any], spool: Path, *, start_seq: int, count: int = 0,
                 rate: float = 50.0, log_path: Optional[Path] = None) -> None:
        self.durable: dict[str, list[int]] = {}
        self.lines: list[str] = []
        self._cond = threading.Condition()
        stderr = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(config_doc), str(spool), "--start-seq", str(start_seq),
             "--count", str(count), "--rate", str(rate)],
            stdout=subprocess.PIPE, stderr=stderr, text=True)
        if log_path:
            stderr.close()  # type: ignore[union-attr]
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            words = line.split()
            with self._cond:
                self.lines.append(line.strip())
                if words and words[0] == "durable":
                    self.durable.setdefault(words[1], []).append(int(words[2]))
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[["Child"], bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not predicate(self)):
                    return predicate(self)
                self._cond.wait(min(remaining, 0.5))
            return True

    def min_durable(self) -> int:
        with self._cond:
            return min((len(v) for v in self.durable.values()), default=0) if len(self.durable) == 4 else 0

    def sigkill(self) -> None:
        self.proc.kill()  # SIGKILL: no cleanup, no flush, no clean MQTT disconnect
        self.proc.wait(10)
        self._reader.join(10)

    def wait_exit(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(10)
        return rc

    def ensure_dead(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _config_doc(broker: Mosquitto) -> dict[str, Any]:
    return make_config(broker).model_dump(mode="json", exclude_none=True)


@pytest.mark.slow
def test_sigkill_mid_stream_and_while_offline_then_restart_delivers_every_sequence(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "broker", persistence=True).start()
    children: list[Child] = []
    sub: Optional[Subscriber] = None
    try:
        sub = Subscriber(broker, ["plant/dev1/+/detections"], persistent=True)
        spool = tmp_path / "state" / "spool.sqlite3"
        doc = _config_doc(broker)

        # 1. Streaming while connected, killed mid-stream: its in-flight window dies with it.
        a = Child(doc, spool, start_seq=0, log_path=tmp_path / "a.log")
        children.append(a)
        assert a.wait_for(lambda c: c.min_durable() >= 60), a.lines[-5:]
        assert sub.wait_for(lambda ms: len(ms) >= 100)
        a.sigkill()

        # 2. Broker down; the next process spools (the old backlog plus its own) and is killed too.
        broker.stop()
        b = Child(doc, spool, start_seq=1000, log_path=tmp_path / "b.log")
        children.append(b)
        assert b.wait_for(lambda c: c.min_durable() >= 40), b.lines[-5:]
        b.sigkill()

        # 3. Broker back; a third process replays everything, publishes 20 more frames per camera, exits.
        broker.start()
        c = Child(doc, spool, start_seq=5000, count=20, log_path=tmp_path / "c.log")
        children.append(c)
        assert c.wait_exit(90) == 0, (tmp_path / "c.log").read_text()[-3000:]

        expected = {cam: set(a.durable.get(cam, [])) | set(b.durable.get(cam, [])) | set(c.durable.get(cam, []))
                    for cam in ("cam0", "cam1", "cam2", "cam3")}

        def all_arrived(ms: list[Any]) -> bool:
            got = seqs_by_camera([json.loads(m.payload) for m in ms])
            return all(expected[cam] <= set(got.get(cam, [])) for cam in expected)

        assert sub.wait_for(all_arrived, timeout=60), "sequence numbers missing after crash and restart"
        payloads = [json.loads(m.payload) for m in sub.messages]
        got = seqs_by_camera(payloads)
        for cam, seqs in got.items():
            assert seqs == sorted(seqs), f"{cam}: out of order after dedupe"
            first_run = [s for s in seqs if s < 1000]
            # Whatever the first process committed before SIGKILL is a gap-free prefix.
            assert first_run == list(range(len(first_run))), f"{cam}: gap in the first run"
            assert len(first_run) >= len(a.durable[cam])
            assert [s for s in seqs if 1000 <= s < 5000] == list(range(1000, 1000 + len([
                s for s in seqs if 1000 <= s < 5000])))
            assert [s for s in seqs if s >= 5000] == list(range(5000, 5020))
        for p in payloads[:50]:
            validate("detections", p)
    finally:
        for child in children:
            child.ensure_dead()
        if sub is not None:
            sub.close()
        broker.stop()


@pytest.mark.slow
def test_sent_but_unacknowledged_detections_are_replayed_after_sigkill(tmp_path: Path) -> None:
    """The broker hangs (SIGSTOP) so the publisher's in-flight window fills with messages the broker never
    acknowledged; publisher and broker are then killed. Those messages must still be in the spool."""
    broker = Mosquitto(tmp_path / "broker").start()
    children: list[Child] = []
    subs: list[Subscriber] = []
    try:
        before = Subscriber(broker, ["plant/dev1/+/detections"])
        subs.append(before)
        spool = tmp_path / "spool.sqlite3"
        doc = _config_doc(broker)
        a = Child(doc, spool, start_seq=0, rate=100, log_path=tmp_path / "a.log")
        children.append(a)
        assert a.wait_for(lambda c: c.min_durable() >= 20), a.lines[-5:]
        assert before.wait_for(lambda ms: len(ms) >= 40)
        broker.pause()
        # Beyond the default in-flight window (100): some sent-unacknowledged, the rest still queued.
        assert a.wait_for(lambda c: c.min_durable() >= 100), a.lines[-5:]
        a.sigkill()
        broker.kill()
        before.close()
        subs.remove(before)

        broker.start()
        after = Subscriber(broker, ["plant/dev1/+/detections"])
        subs.append(after)
        c = Child(doc, spool, start_seq=5000, count=5, log_path=tmp_path / "c.log")
        children.append(c)
        assert c.wait_exit(90) == 0, (tmp_path / "c.log").read_text()[-3000:]
        assert after.wait_for(lambda ms: sum(json.loads(m.payload)["seq"] >= 5000 for m in ms) >= 20)
        got_before = seqs_by_camera([json.loads(m.payload) for m in before.messages])
        got_after = seqs_by_camera([json.loads(m.payload) for m in after.messages])
        for cam in ("cam0", "cam1", "cam2", "cam3"):
            delivered = set(got_before.get(cam, [])) | set(got_after.get(cam, []))
            missing = sorted(set(a.durable[cam]) - delivered)
            assert not missing, f"{cam}: lost {len(missing)} acknowledged-as-durable messages: {missing[:10]}"
            assert got_after[cam] == sorted(got_after[cam]), f"{cam}: replay out of order"
    finally:
        for child in children:
            child.ensure_dead()
        for sub in subs:
            sub.close()
        broker.kill()


def test_last_will_reports_offline_when_the_publisher_is_killed(tmp_path: Path, broker: Mosquitto,
                                                               subscriber_factory: Any) -> None:
    sub = subscriber_factory(broker, ["plant/dev1/status"])
    child = Child(_config_doc(broker), tmp_path / "spool.sqlite3", start_seq=0, rate=5,
                  log_path=tmp_path / "child.log")
    try:
        assert sub.wait_for(lambda ms: any(json.loads(m.payload)["state"] == "online" for m in ms)), \
            (tmp_path / "child.log").read_text()
        child.sigkill()
        assert sub.wait_for(lambda ms: json.loads(ms[-1].payload)["state"] == "offline", timeout=30)
    finally:
        child.ensure_dead()
    will = json.loads(sub.messages[-1].payload)
    validate("device_status", will)
    assert will["reason"] == "connection lost"
    assert "time" not in will  # the will is composed at connect time; a time in it would be wrong
    # Retained: a dashboard that connects later still learns the device is offline.
    late = subscriber_factory(broker, ["plant/dev1/status"])
    assert late.wait_for(lambda ms: len(ms) >= 1)
    assert late.messages[0].retain
    assert json.loads(late.messages[0].payload)["state"] == "offline"
