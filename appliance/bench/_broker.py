"""A throwaway mosquitto for the benchmarks that publish (mqtt, e2e); not a benchmark itself (the underscore keeps
it out of ``appliance bench``'s list)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


class LocalBroker:
    """A throwaway mosquitto on a free loopback port (the benchmark must not depend on a system service)."""

    def __init__(self, workdir: Path) -> None:
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not os.path.exists(exe):
            raise SystemExit("error: mosquitto not found; install it (apt-get install mosquitto) or pass "
                             "--host/--port of a broker")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        conf = workdir / "mosquitto.conf"
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous true", "log_dest none"]
        if os.geteuid() == 0:
            lines.append("user root")
        conf.write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise SystemExit(f"error: local mosquitto did not start on port {self.port}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
