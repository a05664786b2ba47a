"""systemd notify protocol (sd_notify) without a dependency on systemd-python.

The supervisor and the engine builder report READY/STATUS/WATCHDOG/EXTEND_TIMEOUT_USEC through this. Outside
systemd (no ``NOTIFY_SOCKET``) every call is a cheap no-op, so callers never need to check. A socket that
refuses or is gone (systemd re-executing, a test harness that went away) is logged once and the call returns
False: like libsystemd's ``sd_notify``, a lost notification never stops the appliance.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends datagrams to ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]
        self._address = address or None
        self._failing = False

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, **fields: object) -> bool:
        """Send ``KEY=value`` lines; keys are upper-cased (``notify(status="x")`` sends ``STATUS=x``)."""
        if self._address is None:
            return False
        payload = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload, self._address)
        except OSError as exc:
            if not self._failing:  # once per outage: the watchdog would repeat it every tick
                log.warning("systemd notify socket %s refused a notification (%s); carrying on without it "
                            "until it answers again", self._address.replace("\0", "@"), exc)
            self._failing = True
            return False
        if self._failing:
            log.info("systemd notify socket %s answers again", self._address.replace("\0", "@"))
        self._failing = False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify(ready=1, **({"status": status} if status else {}))

    def status(self, text: str) -> bool:
        return self.notify(status=text.replace("\n", " "))

    def watchdog(self) -> bool:
        return self.notify(watchdog=1)

    def stopping(self, status: str | None = None) -> bool:
        return self.notify(stopping=1, **({"status": status} if status else {}))

    def extend_timeout(self, seconds: float) -> bool:
        return self.notify(extend_timeout_usec=int(seconds * 1_000_000))
