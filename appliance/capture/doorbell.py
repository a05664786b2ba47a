"""A doorbell from capture processes to the scheduler: "a new frame is in a ring", without polling.

The scheduler sleeps on one socket until a capture process rings (after each published frame) or an inference
completes (a request slot is free again): polling every ring each millisecond would cost a few percent of a core
for nothing and, on a small CPU, take cycles from inference.

Transport: one Linux abstract-namespace UNIX datagram socket owned by the scheduler's process. The address is
a short string, so it survives the ``spawn`` start of capture children and their restarts; it needs no file
in /dev/shm, so nothing is left behind after a crash. Ringing never blocks and never fails the caller: a full
socket buffer already means "wake up", and a scheduler that is gone is simply not woken."""

from __future__ import annotations

import os
import select
import socket
import uuid


class Doorbell:
    """The listening side (the scheduler's process). ``wait`` returns when rung or after ``timeout`` seconds."""

    def __init__(self) -> None:
        self.address = f"appliance-frames-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind("\0" + self.address)
        self._sock.setblocking(False)
        self._local = DoorbellRinger(self.address)  # for threads of this process (inference completions)

    def ring(self) -> None:
        self._local.ring()

    def wait(self, timeout: float) -> bool:
        """True when rung (every pending ring is consumed: one wake-up serves them all)."""
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            return False
        try:
            while self._sock.recv(64):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        return True

    def close(self) -> None:
        self._local.close()
        self._sock.close()


class DoorbellRinger:
    """The ringing side (a capture process, or a thread beside the scheduler)."""

    def __init__(self, address: str) -> None:
        self._target = "\0" + address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)

    def ring(self) -> None:
        try:
            self._sock.sendto(b"\1", self._target)
        except OSError:  # full (the scheduler will wake anyway), or gone (nobody to wake): never the caller's problem
            pass

    def close(self) -> None:
        self._sock.close()
