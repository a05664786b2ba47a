"""Progress fan-out: log lines an operator can read, systemd STATUS/EXTEND_TIMEOUT over a real socket, a
callback that cannot break the build, and a heartbeat that stops extending after its limit."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from appliance.detector.engines.progress import ProgressEvent, ProgressReporter
from appliance.sdnotify import Notifier


def _drain(sock: socket.socket) -> list[str]:
    out = []
    sock.setblocking(False)
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_report_reaches_systemd_log_and_callback(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "n.sock")
    events: list[ProgressEvent] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        reporter = ProgressReporter(Notifier({"NOTIFY_SOCKET": path}), events.append, extend_s=120)
        caplog.set_level("INFO", logger="appliance.detector.engines")
        reporter.report("det", "build", 42.4, "tactic selection")
        messages = _drain(sock)
    assert messages == ["STATUS=engines: det build 42% - tactic selection\nEXTEND_TIMEOUT_USEC=120000000"]
    assert events[0].phase == "build" and events[0].percent == 42.4 and events[0].to_dict()["model"] == "det"
    assert "det: build 42% tactic selection" in caplog.text


def test_log_is_throttled_but_phase_changes_always_log(caplog: pytest.LogCaptureFixture) -> None:
    reporter = ProgressReporter(Notifier({}), log_every_percent=10)
    caplog.set_level("INFO", logger="appliance.detector.engines")
    for pct in (10, 11, 12, 13, 25, 26):
        reporter.report("det", "build", pct)
    reporter.report("det", "verify", 80)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0].strip() for line in lines] == ["det: build 10%", "det: build 25%", "det: verify 80%"]


def test_a_failing_callback_does_not_break_the_build(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: ProgressEvent) -> None:
        raise ConnectionError("broker down")

    reporter = ProgressReporter(Notifier({}), broken)
    event = reporter.report("det", "build", 50)
    assert event.percent == 50
    assert "progress callback failed (build continues)" in caplog.text


def test_heartbeat_repeats_the_phase_while_a_native_call_runs() -> None:
    seen = threading.Event()
    events: list[ProgressEvent] = []

    def collect(event: ProgressEvent) -> None:
        events.append(event)
        if len(events) >= 3:
            seen.set()

    reporter = ProgressReporter(Notifier({}), collect, heartbeat_s=0.01)
    reporter.report("det", "build", 10, "building")
    with reporter.heartbeat():
        assert seen.wait(30), "no heartbeat arrived"
    assert all(e.phase == "build" and e.percent == 10 for e in events)
    assert "still working" in events[-1].message and events[-1].message.count("still working") == 1


def test_heartbeat_stops_after_its_limit(caplog: pytest.LogCaptureFixture) -> None:
    readings = iter([0.0, 0.0, 0.0])  # reporter start, the report, the heartbeat's start; then far later

    def clock() -> float:
        return next(readings, 1000.0)

    events: list[ProgressEvent] = []
    reporter = ProgressReporter(Notifier({}), events.append, heartbeat_s=0.01, heartbeat_limit_s=100, clock=clock)
    reporter.report("det", "build", 10)
    caplog.set_level("ERROR", logger="appliance.detector.engines")
    with reporter.heartbeat():
        for _ in range(3000):
            if "no longer extending the start timeout" in caplog.text:
                break
            threading.Event().wait(0.01)
    assert "no longer extending the start timeout" in caplog.text
    assert len(events) == 1  # no beat was sent once past the limit
