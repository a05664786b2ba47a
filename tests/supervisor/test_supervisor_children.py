"""Child restart records with real processes and a controlled clock."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time

import pytest

from appliance.backoff import RestartPolicy
from appliance.supervisor.children import ChildState, ChildSupervisor

ctx = multiprocessing.get_context("spawn")


def _exit_with(code: int) -> None:
    os._exit(code)


def _sleep_forever() -> None:
    time.sleep(600)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wait_dead(record) -> None:
    record.child.join(timeout=30)
    assert not record.child.is_alive()


def test_dead_child_is_restarted_after_backoff_and_the_hook_runs_first() -> None:
    clock = Clock()
    supervisor = ChildSupervisor(clock)
    hooks: list[str] = []
    record = supervisor.register("camera:line1", lambda: ctx.Process(target=_sleep_forever),
                                 RestartPolicy(initial_backoff_s=2, max_backoff_s=60, max_restarts=5),
                                 on_restart=hooks.append)
    supervisor.start_all()
    first = record.child
    try:
        os.kill(first.pid, signal.SIGKILL)
        _wait_dead(record)
        assert supervisor.poll() == [record]
        assert record.state is ChildState.BACKOFF and record.last_exitcode == -signal.SIGKILL
        clock.now += 1.9
        assert supervisor.poll() == [] and hooks == []  # backoff not over yet
        clock.now += 0.2
        assert supervisor.poll() == [record]
        assert hooks == ["camera:line1"] and record.state is ChildState.RUNNING
        assert record.child is not first and record.child.is_alive()
    finally:
        supervisor.stop_all(lambda c: (c.kill(), c.join(10)))
    assert record.state is ChildState.STOPPED and not record.child.is_alive()


def test_backoff_doubles_and_a_crash_loop_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    supervisor = ChildSupervisor(clock)
    policy = RestartPolicy(initial_backoff_s=1, max_backoff_s=30, max_restarts=3, window_s=300)
    record = supervisor.register("camera:bad", lambda: ctx.Process(target=_exit_with, args=(3,)), policy)
    supervisor.start_all()
    delays = []
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            _wait_dead(record)
            supervisor.poll()
            delays.append(record.restart_at - clock.now)
            if record.state is ChildState.CRASH_LOOP:
                break
            clock.now = record.restart_at
            supervisor.poll()
    assert delays == [1, 2, 4, 30]
    assert record.state is ChildState.CRASH_LOOP and record.last_exitcode == 3
    assert "crash loop" in caplog.text and "camera:bad" in caplog.text
    supervisor.stop_all(lambda c: c.join(10))


def test_old_restarts_leave_the_window() -> None:
    policy = RestartPolicy(initial_backoff_s=1, max_restarts=2, window_s=10)
    clock = Clock()
    supervisor = ChildSupervisor(clock)
    record = supervisor.register("c", lambda: ctx.Process(target=_exit_with, args=(1,)), policy)
    supervisor.start_all()
    for _ in range(3):
        _wait_dead(record)
        supervisor.poll()
        assert record.state is ChildState.BACKOFF  # restarts are 20 s apart: never 2 within 10 s
        clock.now = record.restart_at + 20
        supervisor.poll()
    supervisor.stop_all(lambda c: c.join(10))


def test_registering_a_name_twice_is_an_error() -> None:
    supervisor = ChildSupervisor(Clock())
    supervisor.register("a", lambda: ctx.Process(target=_sleep_forever))
    with pytest.raises(ValueError, match="already registered"):
        supervisor.register("a", lambda: ctx.Process(target=_sleep_forever))


def test_a_child_registered_later_starts_alone_and_a_removed_one_is_stopped_and_never_restarted() -> None:
    clock = Clock()
    supervisor = ChildSupervisor(clock)
    supervisor.register("camera:a", lambda: ctx.Process(target=_sleep_forever))
    supervisor.start_all()
    record = supervisor.register("camera:b", lambda: ctx.Process(target=_sleep_forever))
    supervisor.start("camera:b")
    [a, b] = [r.child for r in supervisor.records()]
    try:
        assert record.state is ChildState.RUNNING and b.is_alive()
        supervisor.remove("camera:b", lambda child: (child.terminate(), child.join(30)))
        assert not b.is_alive() and record.state is ChildState.STOPPED
        assert [r.name for r in supervisor.records()] == ["camera:a"]
        clock.now += 3600
        assert supervisor.poll() == [] and a.is_alive()  # the other child untouched, b not brought back
    finally:
        supervisor.stop_all(lambda child: (child.terminate(), child.join(30)))
