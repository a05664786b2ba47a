"""Which ``Host`` a page served on loopback answers to: ``localhost``, ``127.0.0.1``, ``[::1]`` and the names in
``web.hosts``, with any port. Anything else is a page of another site that a browser on this machine was led to
(DNS rebinding) and is refused, so it cannot read the CSRF token or apply a layout."""

from __future__ import annotations

from collections.abc import Iterable

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})


def host_name(header: str) -> str:
    """The name of a ``Host`` header without its port, lower case (``[::1]:8080`` -> ``[::1]``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[:header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str | None, configured: Iterable[str] = ()) -> bool:
    if not header:
        return False
    name = host_name(header)
    return name in LOOPBACK_NAMES or name in {c.strip().lower() for c in configured}
