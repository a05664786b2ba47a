"""Length-prefixed messages over a stream socket, standard library only (the RTSP server runs under the system
Python): a JSON header (with ``size``), then ``size`` bytes. Used by the restream's frames (supervisor to RTSP
server) and the camera packets of a passthrough restream (capture process to RTSP server)."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_LENGTH = struct.Struct("!I")


def send_message(sock: socket.socket, header: dict[str, Any], data: bytes | memoryview = b"") -> None:
    payload = memoryview(data).cast("B")  # an array's view counts rows, not bytes
    raw = json.dumps({**header, "size": payload.nbytes}).encode()
    sock.sendall(_LENGTH.pack(len(raw)) + raw)
    if payload.nbytes:
        sock.sendall(payload)


def _read_exactly(sock: socket.socket, size: int) -> bytearray | None:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            return None
        got += n
    return data


def read_message(sock: socket.socket) -> tuple[dict[str, Any], bytearray] | None:
    """(header, data) of the next message; None once the other end closed."""
    length = _read_exactly(sock, _LENGTH.size)
    if length is None:
        return None
    raw = _read_exactly(sock, _LENGTH.unpack(length)[0])
    if raw is None:
        return None
    header = json.loads(raw)
    data = _read_exactly(sock, int(header["size"]))
    return None if data is None else (header, data)
