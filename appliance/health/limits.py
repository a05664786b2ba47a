"""What one client may hold of the HTTP endpoint, as ASGI middleware in front of every route: each request's
body must arrive whole within ``body_deadline_s`` and be at most ``max_body`` bytes (else 408 or 413, and the
connection is closed), and the page's requests (every path but the reserved ones: health, liveness, metrics)
are capped per client address and in total (else 429). The reserved paths never wait for a page request, so no
page client can starve ``/healthz`` or ``/livez``. docs/security.md, "Limits of the HTTP endpoint"."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

RESERVED = frozenset({"/livez", "/readyz", "/healthz", "/health", "/metrics"})
MAX_BODY = 256 * 1024          # the largest legal layout is well under this (docs/ui.md, "Limits")
BODY_DEADLINE_S = 5.0          # from the request's head to its last body byte
PAGE_PER_CLIENT = 16           # page requests in flight from one address (an event stream counts while open)
PAGE_TOTAL = 64                # page requests in flight from all clients
LOG_EVERY_S = 60.0             # one log line per client and kind of refusal per minute; the rest are counted


class RequestLimits:
    """The middleware; ``clock`` only decides when a refusal is logged again."""

    def __init__(self, app: App, *, reserved: frozenset[str] = RESERVED, max_body: int = MAX_BODY,
                 body_deadline_s: float = BODY_DEADLINE_S, page_per_client: int = PAGE_PER_CLIENT,
                 page_total: int = PAGE_TOTAL, clock: Callable[[], float] = time.monotonic) -> None:
        self._app, self._reserved, self._max_body = app, reserved, max_body
        self._deadline_s, self._per_client, self._total = body_deadline_s, page_per_client, page_total
        self._clock = clock
        self._in_flight: dict[str, int] = {}
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}  # (client, kind) -> (when logged, refused since)

    @property
    def in_flight(self) -> int:
        return sum(self._in_flight.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        client = str((scope.get("client") or ("?", 0))[0])
        length = _content_length(scope)
        if length is not None and length > self._max_body:
            self._note(client, "body", f"a {length}-byte body to {_short(scope['path'])}")
            await _refuse(send, 413, f"request body too large: at most {self._max_body} bytes")
            return
        if scope["path"] in self._reserved:
            await self._serve(scope, receive, send, client, length)
            return
        if self._in_flight.get(client, 0) >= self._per_client or self.in_flight >= self._total:
            self._note(client, "busy", f"{self._in_flight.get(client, 0)} requests in flight")
            await _refuse(send, 429, "too many requests at once from this address: try again shortly",
                          {"retry-after": "2"})
            return
        self._in_flight[client] = self._in_flight.get(client, 0) + 1
        try:
            await self._serve(scope, receive, send, client, length)
        finally:
            self._in_flight[client] -= 1
            if not self._in_flight[client]:
                del self._in_flight[client]

    async def _serve(self, scope: Scope, receive: Receive, send: Send, client: str, length: int | None) -> None:
        if length is None and not _chunked(scope):
            await self._app(scope, receive, send)
            return
        try:
            body = await asyncio.wait_for(self._read_body(receive), self._deadline_s)
        except asyncio.TimeoutError:
            self._note(client, "slow", f"no whole body to {_short(scope['path'])} within {self._deadline_s:g} s")
            await _refuse(send, 408, f"request body not received within {self._deadline_s:g} s")
            return
        except _TooLarge:
            self._note(client, "body", f"a body over {self._max_body} bytes to {_short(scope['path'])}")
            await _refuse(send, 413, f"request body too large: at most {self._max_body} bytes")
            return
        except _Gone:
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._app(scope, replay, send)

    async def _read_body(self, receive: Receive) -> bytes:
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                raise _TooLarge()
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    def _note(self, client: str, kind: str, what: str) -> None:
        """Log a refusal once per client and kind per LOG_EVERY_S, with how many were refused since."""
        now = self._clock()
        when, since = self._logged.get((client, kind), (-LOG_EVERY_S, 0))
        if now - when < LOG_EVERY_S:
            self._logged[(client, kind)] = (when, since + 1)
            return
        if len(self._logged) > 1024:
            self._logged.clear()
        self._logged[(client, kind)] = (now, 0)
        more = f" ({since} more refused in the last minute)" if since else ""
        log.warning("http endpoint: refused %s from %s: %s%s", _REASONS[kind], client, what, more)


_REASONS = {"body": "a request too large", "busy": "a page request over the limit", "slow": "a slow request body"}


class _TooLarge(Exception):
    pass


class _Gone(Exception):
    pass


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _content_length(scope: Scope) -> int | None:
    raw = _header(scope, b"content-length")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _chunked(scope: Scope) -> bool:
    return b"chunked" in (_header(scope, b"transfer-encoding") or b"").lower()


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


async def _refuse(send: Send, status: int, message: str, extra: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close"), *((k.encode(), v.encode()) for k, v in (extra or {}).items())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
