"""A command handler registered before the part that serves it exists.

The publisher connects (and takes what the broker kept for the device's persistent session) minutes before the OTA
manager runs: a first boot builds the engine and starts Triton in between. A command registered only then would
answer ``unknown_command`` to a rollback an operator sent while the device was away, and the command is gone.
Registered at once through this stand-in, such a command waits for the real handler (up to ``wait_s``) and then
runs, or gets a ``failed`` reply that says why and what to do.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Optional

from appliance.mqtt.commands import Command, CommandHandler
from appliance.mqtt.errors import CommandError


class LateHandler:
    """``publisher.on_command(name, late)`` now, ``late.set(handler)`` when ``what`` runs, ``close()`` at stop."""

    def __init__(self, what: str, wait_s: float) -> None:
        self.what = what
        self.wait_s = wait_s
        self._handler: Optional[CommandHandler] = None
        self._closed = False
        self._changed = threading.Condition()

    def set(self, handler: CommandHandler) -> None:
        with self._changed:
            self._handler = handler
            self._changed.notify_all()

    def close(self) -> None:
        """The appliance stops: a command still waiting gets its reply now."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def __call__(self, command: Command) -> Optional[Mapping[str, Any]]:
        with self._changed:
            self._changed.wait_for(lambda: self._handler is not None or self._closed, self.wait_s)
            handler = self._handler
        if handler is None:
            state = "is stopping" if self._closed else f"is not running after {self.wait_s:g} s"
            raise CommandError(f"{self.what} {state} (the appliance is starting or stopping: an engine build or "
                               f"Triton's start comes first); send the command again when its status is online")
        return handler(command)
