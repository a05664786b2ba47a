"""The appliance's HTTP endpoint: ``/metrics`` (ours plus Triton's), ``/healthz`` (JSON summary), and whatever
routes the caller adds (camera snapshots, the operator's page), served by Starlette on uvicorn in one background
thread with its own event loop.

It never stops the appliance: a port that is taken is retried in the background (health still goes out over
MQTT), at most ``max_connections`` connections are served at once and ``per_client`` from one address (the next
one gets a plain 503), a client that sends no request within ``timeout_s`` is hung up on, every request passes
appliance.health.limits (body size and deadline; the page's requests capped, the health paths never), and a failing
handler answers a plain 500 whose detail goes only to the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from uvicorn.protocols.http.h11_impl import H11Protocol

from appliance.health.limits import RequestLimits
from appliance.health.probes import probe_routes

log = logging.getLogger(__name__)

CONTENT_TYPE_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
# Connections at once: a guard on sockets and memory; what the page may hold is capped per request (limits.py).
MAX_CONNECTIONS = 256
MAX_PER_CLIENT = 32  # from one address: a browser holds about six, a scraper one
SOCKET_TIMEOUT_S = 10.0  # a client that sends no request, or idles between requests, frees its slot after this
BIND_RETRY_S = 5.0
STOP_GRACE_S = 1.0  # open event streams are cut after this on close
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy\n"
_INTERNAL = "internal error: see the appliance's log\n"


def _bounded_protocol(slots: int, per_client: int, timeout_s: float) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol that turns a connection past ``slots`` (or past ``per_client`` from its address)
    away at once (before it sends anything) and hangs up on one that has not sent a whole request head within
    ``timeout_s``."""
    by_address: dict[str, int] = {}

    class Bounded(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _address: str | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._address = address = str(self.client[0]) if self.client else "?"
            by_address[address] = by_address.get(address, 0) + 1
            if len(self.connections) > slots or by_address[address] > per_client:
                log.debug("http endpoint busy (%d connections, %d from %s); turning it away", len(self.connections),
                          by_address[address], address)
                transport.write(_BUSY)
                transport.close()
                return
            self._head_timer = self.loop.call_later(timeout_s, self._head_timeout)

        def _head_timeout(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            if self._address is not None:
                by_address[self._address] -= 1
                if not by_address[self._address]:
                    del by_address[self._address]
                self._address = None
            super().connection_lost(exc)

    return Bounded


def health_routes(metrics: Callable[[], bytes], health: Callable[[], dict],
                  files: Callable[[str], tuple[str, bytes] | None] | None = None) -> list[BaseRoute]:
    """``/metrics``, ``/healthz`` (200 when ``ok``, else 503), ``/livez`` and ``/readyz`` (health.probes) and,
    through ``files(path)``, the snapshot paths ``/cameras/<id>/latest.jpg`` and ``/events/<id>.jpg``. The
    collectors run in a worker thread."""

    async def metrics_page(_request: Request) -> Response:
        return Response(await run_in_threadpool(metrics), media_type=CONTENT_TYPE_PROMETHEUS)

    async def healthz(_request: Request) -> Response:
        summary = await run_in_threadpool(health)
        return Response(json.dumps(summary, default=str), status_code=200 if summary.get("ok") else 503,
                        media_type="application/json")

    async def file(request: Request) -> Response:
        found = await run_in_threadpool(files, request.url.path) if files is not None else None
        if found is None:
            return PlainTextResponse("not found: try /metrics or /healthz\n", status_code=404)
        return Response(found[1], media_type=found[0])

    return [Route("/metrics", metrics_page), Route("/healthz", healthz), Route("/health", healthz),
            *probe_routes(health), Route("/cameras/{camera}/latest.jpg", file), Route("/events/{event}.jpg", file)]


def _app(routes: Sequence[BaseRoute]) -> Starlette:
    async def not_found(_request: Request, _exc: Exception) -> Response:
        return PlainTextResponse("not found: try /metrics or /healthz\n", status_code=404)

    async def internal(request: Request, _exc: Exception) -> Response:
        log.error("http endpoint failed on %s", request.url.path, exc_info=_exc)
        return PlainTextResponse(_INTERNAL, status_code=500)

    return Starlette(routes=list(routes), exception_handlers={404: not_found, Exception: internal},
                     middleware=[Middleware(RequestLimits)])


class HealthServer:
    """Serves health on ``host:port`` (port 0 picks a free one) from a background thread; ``close()`` stops it.

    If the port cannot be had, it says so in the log and tries again every ``retry_s`` until it can or is closed.
    ``routes``: more Starlette routes, served before the snapshot paths (the operator's page).
    """

    def __init__(self, host: str, port: int, metrics: Callable[[], bytes], health: Callable[[], dict],
                 files: Callable[[str], tuple[str, bytes] | None] | None = None, *,
                 routes: Sequence[BaseRoute] = (), max_connections: int = MAX_CONNECTIONS,
                 per_client: int = MAX_PER_CLIENT, timeout_s: float = SOCKET_TIMEOUT_S,
                 retry_s: float = BIND_RETRY_S, tls: tuple[Path, Path] | None = None) -> None:
        """``files(path)``: (content type, body) for a snapshot path, else None; ``tls``: (certificate, key) PEM
        files to serve https instead of http."""
        self._tls = tls
        self._address = (host, port)
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # its start and stop lines: ours say it
        self._app = _app([*routes, *health_routes(metrics, health, files)])
        self._protocol = _bounded_protocol(max_connections, per_client, timeout_s)
        self._timeout_s, self._retry_s = timeout_s, retry_s
        self._closed = threading.Event()
        self._lock = threading.Lock()  # close() against a bind that succeeds at that moment
        self._server: uvicorn.Server | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._retrier: threading.Thread | None = None
        if not self._try_bind(first=True):
            self._retrier = threading.Thread(target=self._retry_bind, name="health-bind", daemon=True)
            self._retrier.start()

    @property
    def port(self) -> int | None:
        """The port it listens on; None while the configured one is still taken."""
        return self._port

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            server = self._server
        if self._retrier is not None:
            self._retrier.join(timeout=5)
        if server is not None:
            server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5 + STOP_GRACE_S)
        self._port = None

    def _listen(self) -> socket.socket:
        host, port = self._address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        return sock

    def _try_bind(self, first: bool) -> bool:
        host, port = self._address
        try:
            sock = self._listen()
        except OSError as exc:
            if first:
                log.warning("health endpoint: cannot listen on %s:%d (%s); trying again every %g s, and health "
                            "still goes out over MQTT", host, port, exc.strerror or exc, self._retry_s)
            return False
        config = uvicorn.Config(self._app, loop="asyncio", http=self._protocol, lifespan="off", log_config=None,
                                access_log=False, timeout_keep_alive=max(1, round(self._timeout_s)),
                                timeout_graceful_shutdown=max(1, round(STOP_GRACE_S)), server_header=False,
                                ssl_certfile=str(self._tls[0]) if self._tls else None,
                                ssl_keyfile=str(self._tls[1]) if self._tls else None)
        with self._lock:
            if self._closed.is_set():
                sock.close()
                return True
            self._server = server = uvicorn.Server(config)
            self._port = int(sock.getsockname()[1])
            self._thread = threading.Thread(target=self._serve, args=(server, sock), name="health-http", daemon=True)
            self._thread.start()
        if not first:
            log.info("health endpoint: listening on %s:%d now", host, port)
        return True

    @staticmethod
    def _serve(server: uvicorn.Server, sock: socket.socket) -> None:
        try:
            server.run(sockets=[sock])
        except Exception:
            log.exception("health endpoint stopped")
        finally:
            sock.close()

    def _retry_bind(self) -> None:
        while not self._closed.wait(self._retry_s):
            if self._try_bind(first=False):
                return

