"""The appliance's HTTP server (appliance.webserver): Starlette on uvicorn in one background thread with its own
event loop, serving ``Routes`` under their kind's limits.

It never stops the appliance: a port that is taken is retried in the background (health still goes out over
MQTT), connections are capped below HTTP (appliance.webserver.gate), every request passes the limits of its kind
of route (appliance.webserver.limits), and a failing handler answers a plain 500 whose detail goes only to the log.
"""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from uvicorn.protocols.http.h11_impl import H11Protocol

from appliance.webserver.gate import gated
from appliance.webserver.limits import Limits, RequestLimits
from appliance.webserver.routes import Routes

log = logging.getLogger(__name__)

BIND_RETRY_S = 5.0
STOP_GRACE_S = 1.0  # open streams are cut after this on close
_INTERNAL = "internal error: see the appliance's log\n"


def _app(routes: Routes, limits: Limits) -> Starlette:
    async def not_found(_request: Request, _exc: Exception) -> Response:
        return PlainTextResponse("not found: try /metrics or /healthz\n", status_code=404)

    async def internal(request: Request, _exc: Exception) -> Response:
        log.error("http endpoint failed on %s", request.url.path, exc_info=_exc)
        return PlainTextResponse(_INTERNAL, status_code=500)

    return Starlette(routes=routes.all(), exception_handlers={404: not_found, Exception: internal},
                     middleware=[Middleware(RequestLimits, kind=routes.kind, limits=limits)])


class WebServer:
    """Serves ``routes`` on ``host:port`` (port 0 picks a free one) from a background thread; ``close()`` stops it.

    If the port cannot be had, it says so in the log and tries again every ``retry_s`` until it can or is closed.
    """

    def __init__(self, host: str, port: int, routes: Routes, *, limits: Limits = Limits(),
                 retry_s: float = BIND_RETRY_S, tls: tuple[Path, Path] | None = None) -> None:
        """``tls``: (certificate, key) PEM files to serve https instead of http."""
        self._tls = tls
        self._address = (host, port)
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # its start and stop lines: ours say it
        self._app = _app(routes, limits)
        self._protocol = gated(H11Protocol, limits)
        self._timeout_s, self._retry_s = limits.head_timeout_s, retry_s
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

