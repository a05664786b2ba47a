"""A value quoted in an error message or a log line: its ``repr``, cut to a few dozen characters, so a 10 MB name
sent to the page costs one short line, not 10 MB of journal."""

from __future__ import annotations

QUOTE_CHARS = 40


def shown(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)``, or its first ``limit`` characters and how long it was."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters as text)"
