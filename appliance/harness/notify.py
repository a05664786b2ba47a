"""systemd's end of sd_notify (appliance.sdnotify is the daemon's): a datagram socket that collects every
notification a process started with ``NOTIFY_SOCKET=<path>`` sends."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path


class NotifySocket:
    """Bound at ``path`` on construction; a thread appends each datagram to ``messages`` until ``close()``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self.sock.recv(65536).decode())
            except socket.timeout:
                continue

    def fields(self) -> list[str]:
        """Every line of every notification so far (``READY=1``, ``STATUS=...``)."""
        return [line for m in list(self.messages) for line in m.splitlines()]

    def wait_for(self, line: str, timeout: float) -> bool:
        """Whether ``line`` arrived within ``timeout`` seconds (callers assert it, adding the daemon's log)."""
        deadline = time.monotonic() + timeout
        while line not in self.fields():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
