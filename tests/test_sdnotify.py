"""The systemd notifier: a notify socket that is gone or refuses never stops the appliance (soak finding)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from appliance.sdnotify import Notifier


def _listen(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    return sock


def test_notifications_arrive_as_key_value_lines(tmp_path: Path) -> None:
    listener = _listen(tmp_path / "notify")
    try:
        assert Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify")}).ready("serving")
        assert listener.recv(4096) == b"READY=1\nSTATUS=serving"
    finally:
        listener.close()


def test_a_socket_that_went_away_is_logged_once_and_the_notifier_recovers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "notify"
    notifier = Notifier({"NOTIFY_SOCKET": str(path)})
    listener = _listen(path)
    assert notifier.watchdog()
    listener.close()  # the bound path stays: sendto now gets ECONNREFUSED, as the soak's daemon did
    with caplog.at_level(logging.INFO, logger="appliance.sdnotify"):
        assert notifier.watchdog() is False
        assert notifier.stopping("draining") is False
        path.unlink()  # and a path that is gone altogether (ENOENT)
        assert notifier.watchdog() is False
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "refused a notification" in warnings[0].getMessage()
        listener = _listen(path)
        try:
            assert notifier.watchdog()
            assert listener.recv(4096) == b"WATCHDOG=1"
        finally:
            listener.close()
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_without_a_notify_socket_every_call_is_a_no_op() -> None:
    assert Notifier({}).enabled is False
    assert Notifier({}).ready() is False
