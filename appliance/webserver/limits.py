"""What one client may hold of the HTTP server, per kind of route (appliance.webserver.routes).

``Limits`` holds every figure; ``RequestLimits`` is the ASGI middleware in front of every route that applies
them to requests: a body must be at most ``max_body`` bytes (else 413, and the connection is closed), and a
request's body (health or request routes) must arrive whole within ``body_deadline_s`` (else 408). Requests are
capped per client address and in all (else 429), and so are streams, each kind against its own cap: an open video
or event stream never takes a page request's place, and a held request never blocks a stream. Health routes are
never capped, so no client can starve ``/healthz`` or ``/livez``. The connection caps and the time to send a
request's head are applied below HTTP (appliance.webserver.gate). docs/security.md, "Limits of the HTTP
endpoint"."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from appliance.errors import ApplianceError
from appliance.webserver.routes import Kind

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 256 * 1024          # the largest legal layout is well under this (docs/ui.md, "Limits")
BODY_DEADLINE_S = 5.0          # from the request's head to its last body byte
REQUESTS_PER_CLIENT = 16       # requests in flight from one address
REQUESTS_TOTAL = 64            # requests in flight from all clients
STREAMS_PER_CLIENT = 8         # streams open from one address (event streams, videos, clip downloads)
STREAMS_TOTAL = 32             # streams open from all clients (a video stream runs one ffmpeg)
CONNECTIONS_PER_CLIENT = 32    # from one address: a browser holds about six, a scraper one
CONNECTIONS_TOTAL = 256        # a guard on sockets and memory
HEAD_TIMEOUT_S = 10.0          # a client that sends no request head, or idles between requests, is hung up on
LOG_EVERY_S = 60.0             # one log line per client and kind of refusal per minute; the rest are counted


@dataclass(frozen=True)
class Limits:
    """Every limit of the server, one field each (the defaults above)."""

    max_body: int = MAX_BODY
    body_deadline_s: float = BODY_DEADLINE_S
    requests_per_client: int = REQUESTS_PER_CLIENT
    requests_total: int = REQUESTS_TOTAL
    streams_per_client: int = STREAMS_PER_CLIENT
    streams_total: int = STREAMS_TOTAL
    connections_per_client: int = CONNECTIONS_PER_CLIENT
    connections_total: int = CONNECTIONS_TOTAL
    head_timeout_s: float = HEAD_TIMEOUT_S


class _InFlight:
    """What is in flight of one kind, per client address, against a cap per address and one in all."""

    def __init__(self, per_client: int, total: int) -> None:
        self._per_client, self._total = per_client, total
        self._by_client: dict[str, int] = {}

    def of(self, client: str) -> int:
        return self._by_client.get(client, 0)

    def take(self, client: str) -> bool:
        if self.of(client) >= self._per_client or sum(self._by_client.values()) >= self._total:
            return False
        self._by_client[client] = self.of(client) + 1
        return True

    def give_back(self, client: str) -> None:
        self._by_client[client] -= 1
        if not self._by_client[client]:
            del self._by_client[client]


class RequestLimits:
    """The middleware; ``kind(scope)`` names the kind of route a request goes to; ``clock`` only decides when a
    refusal is logged again."""

    def __init__(self, app: App, *, kind: Callable[[Scope], Kind], limits: Limits = Limits(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._app, self._kind, self._clock = app, kind, clock
        self._max_body, self._deadline_s = limits.max_body, limits.body_deadline_s
        self._requests = _InFlight(limits.requests_per_client, limits.requests_total)
        self._streams = _InFlight(limits.streams_per_client, limits.streams_total)
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}  # (client, kind) -> (when logged, refused since)

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
        kind = self._kind(scope)
        if kind == "health":
            await self._serve(scope, receive, send, client, length)
            return
        held = self._streams if kind == "stream" else self._requests
        if not held.take(client):
            self._note(client, kind, f"{held.of(client)} {kind}s in flight")
            await _refuse(send, 429, _BUSY[kind], {"retry-after": "2"})
            return
        try:
            if kind == "stream":  # a stream's response lasts: its body (if any) is the route's to read
                await self._app(scope, receive, send)
            else:
                await self._serve(scope, receive, send, client, length)
        finally:
            held.give_back(client)

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


_REASONS = {"body": "a request too large", "request": "a request over the limit", "stream": "a stream over the limit",
            "slow": "a slow request body"}
_BUSY = {"request": "too many requests at once from this address: try again shortly",
         "stream": "too many streams open from this address: close a view or a download"}


class _TooLarge(ApplianceError):
    pass


class _Gone(ApplianceError):
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
