"""Typed errors of the MQTT publisher, one base so callers can catch the family."""

from __future__ import annotations

from appliance.errors import ApplianceError


class MqttError(ApplianceError):
    """Base of every error this package raises on purpose."""


class MqttConfigError(MqttError):
    """The configuration cannot be used (unreadable password file, bad TLS material, bad id)."""


class MqttConnectError(MqttError):
    """A command-line client could not connect (broker unreachable, TLS refused, credentials refused); the
    message says which and what to check."""


class NotStartedError(MqttError):
    """A publisher method that needs start() was called before start() or after stop()."""


class SpoolError(MqttError):
    """The on-disk spool cannot be opened or written."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(f"{message} (spool {path})")
        self.path = path


class SpoolInUse(SpoolError):
    """Another process holds the spool (a second appliance on the same state dir); ``pid``: its pid."""

    def __init__(self, pid: str, path: str) -> None:
        super().__init__(f"the spool is in use by another process (pid {pid}): is another appliance running on "
                         "this state dir?", path)
        self.pid = pid


class CommandError(MqttError):
    """Raised by a command handler to answer with a clean error reply (code 'failed' or 'bad_request')
    instead of an internal error."""

    CODES = ("failed", "bad_request")

    def __init__(self, message: str, code: str = "failed") -> None:
        if code not in self.CODES:
            raise ValueError(f"CommandError code must be one of {self.CODES}, got {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message


# Why a command's signature was not accepted (docs/mqtt.md, "Signed commands"); each is its own reply code.
REFUSAL_CODES = ("unsigned", "bad_signature", "unknown_key", "wrong_target", "expired", "not_yet_valid", "replayed")


class CommandRefused(MqttError):
    """A state-changing command was refused before its handler ran: unsigned, not verifiable, not for this
    device and command, out of its time window, or seen before. ``code`` is one of REFUSAL_CODES."""

    def __init__(self, code: str, message: str) -> None:
        if code not in REFUSAL_CODES:
            raise ValueError(f"CommandRefused code must be one of {REFUSAL_CODES}, got {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
