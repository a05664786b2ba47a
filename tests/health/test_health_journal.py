"""Native journald logging, received on a real datagram socket that stands in for journald."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from support.journal import FakeJournald, parse_entry

from appliance.logs import JournalHandler, configure, use_journal


def test_entries_carry_priority_logger_and_structured_fields(tmp_path: Path) -> None:
    path = tmp_path / "journal.sock"
    journald = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    journald.bind(str(path))
    journald.settimeout(5)
    logger = logging.getLogger("appliance.test.journal")
    handler = JournalHandler(path)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("camera %s stalled", "line1", extra={"camera": "line1", "stage": "capture"})
        first = parse_entry(journald.recv(65536))
        logger.error("two\nlines", extra={"model": "yolov3-tiny"})
        second = parse_entry(journald.recv(65536))
    finally:
        logger.removeHandler(handler)
        handler.close()
        journald.close()
    assert first["MESSAGE"] == "camera line1 stalled"
    assert first["PRIORITY"] == "4" and first["CAMERA"] == "line1" and first["STAGE"] == "capture"
    assert first["LOGGER"] == "appliance.test.journal" and first["SYSLOG_IDENTIFIER"] == "appliance"
    assert "MODEL" not in first
    assert second["MESSAGE"] == "two\nlines" and second["PRIORITY"] == "3" and second["MODEL"] == "yolov3-tiny"


def test_journal_is_used_only_when_systemd_says_stderr_goes_there(tmp_path: Path) -> None:
    path = tmp_path / "journal.sock"
    assert not use_journal({"JOURNAL_STREAM": "8:123"}, path)  # no journald socket
    path.touch()
    assert use_journal({"JOURNAL_STREAM": "8:123"}, path)
    assert not use_journal({}, path)
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        configure("INFO", {}, path)
        assert [type(h) for h in root.handlers] == [logging.StreamHandler]
    finally:
        root.handlers[:] = saved
        root.setLevel(level)


def test_a_camera_process_tags_every_record_with_its_camera(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "journal.sock"
    journald = FakeJournald(path)
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        configure("INFO", {"JOURNAL_STREAM": "8:123"}, path, camera="line1")
        logging.getLogger("appliance.capture.sources.rtsp").warning("read timed out")
        logging.getLogger("appliance.capture.loop").info("own field", extra={"camera": "other"})
        first, second = journald.receive(), journald.receive()
        configure("INFO", {}, path, camera="line1")  # not under systemd: stderr, still says which camera
        logging.getLogger("appliance.capture.loop").warning("stalled")
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
        journald.close()
    assert first["MESSAGE"] == "read timed out" and first["CAMERA"] == "line1" and first["PRIORITY"] == "4"
    assert first["LOGGER"] == "appliance.capture.sources.rtsp"
    assert second["CAMERA"] == "other" and second["PRIORITY"] == "6"  # a record's own field wins
    assert " WARNING capture[line1]: stalled" in capsys.readouterr().err


JSON_LOGGER = """
import logging
from appliance.logs import configure
configure("INFO", camera="Dock-1")  # as a capture process does
logging.getLogger("appliance.capture.loop").warning("source %s gone", "rtsp", extra={"stage": "capture"})
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("appliance.supervisor").exception("tick failed")
"""


def test_json_format_is_one_object_per_line_with_the_structured_fields(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "APPLIANCE_LOG_FORMAT": "json", "JOURNAL_STREAM": "8:1"}  # asked for: wins over journald
    result = subprocess.run([sys.executable, "-c", JSON_LOGGER], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stderr.splitlines())
    assert first["message"] == "source rtsp gone" and first["level"] == "WARNING" and first["camera"] == "Dock-1"
    assert first["stage"] == "capture" and first["logger"] == "appliance.capture.loop" and "model" not in first
    assert second["camera"] == "Dock-1" and "ZeroDivisionError" in second["exception"]
    bad = subprocess.run([sys.executable, "-c", JSON_LOGGER], env={**env, "APPLIANCE_LOG_FORMAT": "xml"},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "APPLIANCE_LOG_FORMAT='xml': use one of text, json" in bad.stderr
