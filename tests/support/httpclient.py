"""HTTP requests from a test to a server it started: the tests' one GET (and any other method, with ``request``).
Every status comes back as a ``Reply`` (a 4xx or 5xx is an answer too); ``expect`` turns a status other than the
one wanted into a test failure that shows the body. A server that does not answer raises ``OSError``
(``urllib.error.URLError``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Reply:
    """One answer: its status, its headers (names in lower case) and its body."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return json.loads(self.body)


def request(url: str, *, method: str = "GET", body: bytes | None = None, headers: Mapping[str, str] | None = None,
            timeout: float = 10, expect: int | None = None) -> Reply:
    """One request (redirects followed, as urllib does). With ``expect``, a status other than it fails the test."""
    sent = urllib.request.Request(url, data=body, headers=dict(headers or {}), method=method)
    try:
        with urllib.request.urlopen(sent, timeout=timeout) as response:
            reply = Reply(response.status, {k.lower(): v for k, v in response.headers.items()}, response.read())
    except urllib.error.HTTPError as refused:
        reply = Reply(refused.code, {k.lower(): v for k, v in refused.headers.items()}, refused.read())
    if expect is not None and reply.status != expect:
        raise AssertionError(f"{method} {url} answered {reply.status}, not {expect}: {reply.body[:2000]!r}")
    return reply


def get(url: str, *, headers: Mapping[str, str] | None = None, timeout: float = 10,
        expect: int | None = None) -> Reply:
    """GET ``url``."""
    return request(url, headers=headers, timeout=timeout, expect=expect)

