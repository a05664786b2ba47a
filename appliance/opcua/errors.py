"""The OPC UA server's errors, importable without asyncua (the supervisor imports it whether or not it runs one)."""

from appliance.errors import ApplianceError


class OpcUaStartError(ApplianceError, RuntimeError):
    """The server could not start (port taken, unreadable certificate or users file...); the message says why."""
