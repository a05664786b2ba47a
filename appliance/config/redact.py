"""Secrets out of logs, status and error messages.

``rtsp://user:pass@host`` becomes ``rtsp://user:***@host`` wherever it appears in a text (a camera URL, or a
GStreamer pipeline that embeds one); a config key that names a secret (``password``, ``token``...) is never
echoed with its value."""

from __future__ import annotations

import re

# scheme://user:password@host: the password runs to the last "@" before the path (a raw "@" in it is common).
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*):(?P<password>[^\s/]*)@")
_SECRET_KEY_WORDS = ("password", "secret", "token", "passphrase")


def is_secret_key(location: tuple) -> bool:
    """Whether a config key path (``("mqtt", "password")``) names a secret, so its value must not be shown."""
    return any(isinstance(part, str) and any(w in part.lower() for w in _SECRET_KEY_WORDS) for part in location)


def redact_credentials(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m.group('head')}:***@", text)
