"""The supervisor and the RTSP server talk over one Unix stream socket; the standard library only, because the
server runs under the system Python. Supervisor to server: a frame (a length-prefixed JSON header, then its
pixels). Server to supervisor: one JSON line per change of who watches (``{"watch": [camera, kind]}`` or
``{"unwatch": [...]}``)."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_LENGTH = struct.Struct("!I")
KINDS = ("raw", "annotated")


def send_frame(sock: socket.socket, camera: str, kind: str, width: int, height: int, pixel_format: str,
               pixels: bytes | memoryview) -> None:
    """One HxWx3 frame (``pixel_format`` "bgr" or "rgb") for the stream ``camera``/``kind``."""
    data = memoryview(pixels).cast("B")  # an array's view counts rows, not bytes
    header = json.dumps({"camera": camera, "kind": kind, "width": width, "height": height,
                         "format": pixel_format, "size": data.nbytes}).encode()
    sock.sendall(_LENGTH.pack(len(header)) + header)
    sock.sendall(data)


def _read_exactly(sock: socket.socket, size: int) -> bytearray | None:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            return None
        got += n
    return data


def read_frame(sock: socket.socket) -> tuple[dict[str, Any], bytearray] | None:
    """(header, pixels) of the next frame; None once the supervisor closed its end."""
    length = _read_exactly(sock, _LENGTH.size)
    if length is None:
        return None
    raw = _read_exactly(sock, _LENGTH.unpack(length)[0])
    if raw is None:
        return None
    header = json.loads(raw)
    pixels = _read_exactly(sock, int(header["size"]))
    return None if pixels is None else (header, pixels)


def watch_line(watching: bool, camera: str, kind: str) -> bytes:
    return (json.dumps({"watch" if watching else "unwatch": [camera, kind]}) + "\n").encode()
