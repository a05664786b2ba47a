"""A datagram socket that stands in for journald, and a parser for its native protocol."""

from __future__ import annotations

import socket
import struct
from pathlib import Path


def parse_entry(entry: bytes) -> dict[str, str]:
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


class FakeJournald:
    """Binds ``path`` and hands back the entries sent to it, parsed."""

    def __init__(self, path: Path, timeout_s: float = 5.0) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.settimeout(timeout_s)

    def receive(self) -> dict[str, str]:
        return parse_entry(self._sock.recv(1 << 20))

    def close(self) -> None:
        self._sock.close()
