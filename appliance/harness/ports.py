"""A free TCP port on loopback: how the stand-ins (the local broker, the RTSP camera), the benchmarks and the
tests pick their ports, so that they all choose the same way."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
