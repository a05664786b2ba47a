"""The supervisor and the RTSP server talk over one Unix stream socket; the standard library only, because the
server runs under the system Python. Supervisor to server: a frame (a length-prefixed JSON header, then its
pixels). Server to supervisor: one JSON line per change of who watches (``{"watch": [camera, kind]}`` or
``{"unwatch": [...]}``; kind "passthrough" is ``/<camera>`` carrying the camera's own packets, no encoder)."""

from __future__ import annotations

import json
import socket
from typing import Any

from appliance.framing import read_message, send_message

KINDS = ("raw", "annotated")


def send_frame(sock: socket.socket, camera: str, kind: str, width: int, height: int, pixel_format: str,
               pixels: bytes | memoryview) -> None:
    """One HxWx3 frame (``pixel_format`` "bgr" or "rgb") for the stream ``camera``/``kind``."""
    send_message(sock, {"camera": camera, "kind": kind, "width": width, "height": height, "format": pixel_format},
                 pixels)


def read_frame(sock: socket.socket) -> tuple[dict[str, Any], bytearray] | None:
    """(header, pixels) of the next frame; None once the supervisor closed its end."""
    return read_message(sock)


def watch_line(watching: bool, camera: str, kind: str) -> bytes:
    return (json.dumps({"watch" if watching else "unwatch": [camera, kind]}) + "\n").encode()
