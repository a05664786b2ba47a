"""A local mosquitto started by us: a free loopback port, a generated config, start / wait until it accepts /
stop / kill / pause, for the benchmarks (``appliance bench mqtt``, ``e2e``) and the tests, which must not depend
on a system broker. Test-only extras (TLS material, password files, persistence) build on it in
tests/support/mosquitto.py.

    with LocalBroker(workdir) as broker:          # anonymous, plain TCP on 127.0.0.1:<free port>
        client.connect(broker.host, broker.port)

The generated config: ``listener <port> 127.0.0.1``, then the log destination (``log_path`` given: stderr,
appended to that file; otherwise none), ``user root`` when run as root (mosquitto would otherwise drop to a
``mosquitto`` user that cannot read files under the caller's temporary directory), ``allow_anonymous``, then
the caller's ``config`` lines in order.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Iterable, Optional

from appliance.errors import ApplianceError
from appliance.harness.ports import free_port
from appliance.procs import kill_process, stop_process


class LocalBrokerError(ApplianceError, RuntimeError):
    """mosquitto is not installed, exited at start, or never accepted connections (the message says which)."""


def mosquitto_executable() -> Optional[str]:
    """The mosquitto binary on PATH, or Debian's /usr/sbin/mosquitto (sbin is not on every user's PATH)."""
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    return exe if os.path.exists(exe) else None


class LocalBroker:
    """One mosquitto process on 127.0.0.1:<port>; ``workdir`` holds its config (and log, if ``log_path``)."""

    host = "127.0.0.1"

    def __init__(self, workdir: Path, *, port: Optional[int] = None, allow_anonymous: bool = True,
                 config: Iterable[str] = (), log_path: Optional[Path] = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.conf_path = self.workdir / f"mosquitto-{self.port}.conf"
        self.log_path = log_path
        self._proc: Optional[subprocess.Popen[bytes]] = None
        lines = [f"listener {self.port} 127.0.0.1", "log_dest stderr" if log_path else "log_dest none"]
        if os.geteuid() == 0:
            lines.append("user root")
        lines.append(f"allow_anonymous {'true' if allow_anonymous else 'false'}")
        lines += [line for line in config if line]
        self.conf_path.write_text("\n".join(lines) + "\n")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 15.0) -> "LocalBroker":
        """Start mosquitto (if it is not running) and wait until it accepts connections; on failure it is
        stopped and LocalBrokerError raised."""
        if self.running:
            return self
        exe = mosquitto_executable()
        if exe is None:
            raise LocalBrokerError("mosquitto not found; install it (apt-get install mosquitto)")
        log: IO[bytes] | int = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self._proc = subprocess.Popen([exe, "-c", str(self.conf_path)], stdout=log, stderr=log,
                                          stdin=subprocess.DEVNULL)
        finally:
            if not isinstance(log, int):
                log.close()
        try:
            self.wait_ready(timeout)
        except LocalBrokerError:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Block until the listener accepts TCP connections; LocalBrokerError (with the log) if it never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise LocalBrokerError(f"mosquitto exited with {self._proc.returncode}:\n{self.log_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.05)
        raise LocalBrokerError(f"mosquitto on port {self.port} not accepting connections after {timeout} s:\n"
                               f"{self.log_text()}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (mosquitto saves persistence and closes clients cleanly), SIGKILL after ``timeout``."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout_s=timeout, kill_timeout_s=timeout)

    def kill(self) -> None:
        """SIGKILL: no persistence saved, no clean close (works on a paused broker too)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_process(proc, timeout_s=10)

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing is read or acknowledged (a hung broker)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)

    def restart(self, timeout: float = 15.0) -> "LocalBroker":
        self.stop()
        return self.start(timeout)

    def log_text(self) -> str:
        """What mosquitto logged ("" without ``log_path``)."""
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
