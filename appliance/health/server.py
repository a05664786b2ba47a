"""The local health endpoint: ``/metrics`` (ours plus Triton's), ``/healthz`` (JSON summary), camera snapshots.

It never stops the appliance: a port that is taken is retried in the background (health still goes out over
MQTT), at most ``max_connections`` requests are served at once, each socket times out, and a failing collector
answers a plain 500 whose detail goes only to the log.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

log = logging.getLogger(__name__)

CONTENT_TYPE_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
MAX_CONNECTIONS = 8  # a scraper, a person and `appliance status` need a few; more is a client gone wrong
SOCKET_TIMEOUT_S = 10.0  # a client that stops sending or reading frees its slot after this
BIND_RETRY_S = 5.0
_BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy\n"
_INTERNAL = b"internal error: see the appliance's log\n"


class _BoundedHTTPServer(ThreadingHTTPServer):
    """One thread per connection, but at most ``slots`` at once: the next one gets a 503 and is closed."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], slots: int) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.debug("health endpoint busy (%d connections); turning %s away", MAX_CONNECTIONS, client_address)
            try:
                request.setblocking(False)  # never let a full client buffer stall the accept loop
                request.send(_BUSY)
            except OSError:
                pass  # the client is gone or not reading: closing is all that is left to do
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class HealthServer:
    """Serves health on ``host:port`` (port 0 picks a free one) from background threads; ``close()`` stops it.

    If the port cannot be had, it says so in the log and tries again every ``retry_s`` until it can or is closed.
    """

    def __init__(self, host: str, port: int, metrics: Callable[[], bytes], health: Callable[[], dict],
                 files: Callable[[str], tuple[str, bytes] | None] | None = None, *,
                 max_connections: int = MAX_CONNECTIONS, timeout_s: float = SOCKET_TIMEOUT_S,
                 retry_s: float = BIND_RETRY_S) -> None:
        """``files(path)``: (content type, body) for any other path it serves (the snapshots), else None."""
        self._metrics, self._health, self._files = metrics, health, files
        self._address = (host, port)
        self._handler = self._make_handler(timeout_s)
        self._slots, self._retry_s = max_connections, retry_s
        self._closed = threading.Event()
        self._lock = threading.Lock()  # close() against a bind that succeeds at that moment
        self._httpd: _BoundedHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._retrier: threading.Thread | None = None
        if not self._try_bind(first=True):
            self._retrier = threading.Thread(target=self._retry_bind, name="health-bind", daemon=True)
            self._retrier.start()

    @property
    def port(self) -> int | None:
        """The port it listens on; None while the configured one is still taken."""
        httpd = self._httpd
        return None if httpd is None else int(httpd.server_address[1])

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            httpd, self._httpd = self._httpd, None
        if self._retrier is not None:
            self._retrier.join(timeout=5)
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _try_bind(self, first: bool) -> bool:
        host, port = self._address
        try:
            httpd = _BoundedHTTPServer(self._address, self._handler, self._slots)
        except OSError as exc:
            if first:
                log.warning("health endpoint: cannot listen on %s:%d (%s); trying again every %g s, and health "
                            "still goes out over MQTT", host, port, exc.strerror or exc, self._retry_s)
            return False
        with self._lock:
            if self._closed.is_set():
                httpd.server_close()
                return True
            self._httpd = httpd
            self._thread = threading.Thread(target=httpd.serve_forever, name="health-http", daemon=True)
            self._thread.start()
        if not first:
            log.info("health endpoint: listening on %s:%d now", host, port)
        return True

    def _retry_bind(self) -> None:
        while not self._closed.wait(self._retry_s):
            if self._try_bind(first=False):
                return

    def _make_handler(self, timeout_s: float) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = timeout_s  # StreamRequestHandler sets it on the socket: a silent client cannot hold a slot

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                try:
                    self._route()
                except (socket.timeout, ConnectionError):
                    log.debug("health endpoint: client went away on %s", self.path)
                except Exception:  # a broken collector must not take the endpoint down; the detail is for the log
                    log.exception("health endpoint failed on %s", self.path)
                    self._send(500, "text/plain", _INTERNAL)

            def _route(self) -> None:
                if self.path == "/metrics":
                    self._send(200, CONTENT_TYPE_PROMETHEUS, server._metrics())
                elif self.path in ("/healthz", "/health"):
                    summary = server._health()
                    code = 200 if summary.get("ok") else 503
                    self._send(code, "application/json", json.dumps(summary, default=str).encode())
                elif server._files is not None and (found := server._files(self.path)) is not None:
                    self._send(200, found[0], found[1])
                else:
                    self._send(404, "text/plain", b"not found: try /metrics or /healthz\n")

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: keep quiet
                log.debug("health: " + format, *args)

        return Handler
