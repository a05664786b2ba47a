"""The base of the appliance's own errors: ``except ApplianceError`` catches what the appliance raises on purpose
and none of what a library or a bug raises. Each error keeps its other base (``ValueError``, ``OSError``...), so
an ``except`` clause written for that one still catches it; what a caller needs to act on is a typed field, not an
attribute stuck on afterwards."""

from __future__ import annotations


class ApplianceError(Exception):
    """Any error the appliance raises on purpose."""
