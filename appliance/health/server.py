"""The local health endpoint: ``/metrics`` (ours plus Triton's) and ``/healthz`` (JSON summary)."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

log = logging.getLogger(__name__)

CONTENT_TYPE_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


class HealthServer:
    """Serves health on ``host:port`` (port 0 picks a free one) from a background thread; ``close()`` stops it."""

    def __init__(self, host: str, port: int, metrics: Callable[[], bytes], health: Callable[[], dict],
                 files: Callable[[str], tuple[str, bytes] | None] | None = None) -> None:
        """``files(path)``: (content type, body) for any other path it serves (the snapshots), else None."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                try:
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
                except Exception as exc:  # a broken collector must not take the endpoint down
                    log.exception("health endpoint failed on %s", self.path)
                    self._send(500, "text/plain", f"error: {exc}\n".encode())

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: keep quiet
                log.debug("health: " + format, *args)

        self._metrics = metrics
        self._health = health
        self._files = files
        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="health-http", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
