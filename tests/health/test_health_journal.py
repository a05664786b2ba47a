"""Native journald logging, received on a real datagram socket that stands in for journald."""

from __future__ import annotations

import logging
import socket
import struct
from pathlib import Path

from appliance.logs import JournalHandler, configure, use_journal


def _parse(entry: bytes) -> dict[str, str]:
    """journald's native protocol: NAME=value lines, or NAME\\n + u64 length + data + \\n."""
    fields, i = {}, 0
    while i < len(entry):
        end = entry.index(b"\n", i)
        line = entry[i:end]
        if b"=" in line:
            name, value = line.split(b"=", 1)
            fields[name.decode()] = value.decode()
            i = end + 1
        else:
            (length,) = struct.unpack("<Q", entry[end + 1:end + 9])
            fields[line.decode()] = entry[end + 9:end + 9 + length].decode()
            i = end + 9 + length + 1
    return fields


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
        first = _parse(journald.recv(65536))
        logger.error("two\nlines", extra={"model": "yolov3-tiny"})
        second = _parse(journald.recv(65536))
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
