"""Abuse of the appliance's HTTP endpoint for the tests, from this machine only and always bounded: slow request
bodies, many event streams of one login, and a poller on /healthz that records every answer that was not the
health handler's own. Attackers take their own loopback source address (any 127.x is this machine), so the
poller is another client, as a container's HEALTHCHECK is."""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field


def answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection; ``RESET`` when it resets it before a word."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except ConnectionResetError:
        return data or b"RESET"
    return data


def status_of(reply: bytes) -> str:
    """``408``, ``429``... of an HTTP reply, or ``RESET``/``closed``."""
    if reply == b"RESET":
        return "RESET"
    return reply.split(b" ", 2)[1].decode() if reply.startswith(b"HTTP/") else "closed"


def connect(port: int, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))


@dataclass
class HealthPoller:
    """Polls ``url`` + /healthz every ``period_s`` from its own thread until stopped; ``failures`` lists every
    answer that is not the health summary (a 503 with the summary is an answer: the appliance said how it is)."""

    url: str
    period_s: float = 0.2
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> "HealthPoller":
        self._thread = threading.Thread(target=self._run, name="healthz-poller", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        address = urllib.parse.urlsplit(self.url)
        while not self._stop.wait(self.period_s):
            started = time.monotonic()
            try:
                conn = http.client.HTTPConnection(address.hostname, address.port, timeout=5)
                conn.request("GET", "/healthz")
                response = conn.getresponse()
                body = response.read()
                conn.close()
                if response.status not in (200, 503) or "ok" not in json.loads(body):
                    self.failures.append(f"{response.status} {body[:80]!r}")
                else:
                    self.answered += 1
            except (OSError, ValueError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc} after {time.monotonic() - started:.1f} s")


def slow_bodies(port: int, source: str, connections: int, duration_s: float) -> list[str]:
    """``connections`` at once, each a POST /login announcing 100,000 bytes and sending one a second, reopened
    when the server ends it, for ``duration_s``: the status of every answer, in the order they came."""
    statuses: list[str] = []
    head = b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n" \
           b"Content-Length: 100000\r\n\r\nn"
    open_ = [connect(port, source) for _ in range(connections)]
    for sock in open_:
        sock.sendall(head)
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        time.sleep(1.0)
        ended, _, _ = select.select(open_, [], [], 0)  # the server answered (and closes): read it, open another
        for i, sock in enumerate(open_):
            if sock in ended:
                sock.settimeout(5)
                statuses.append(status_of(answer(sock)))
                sock.close()
                open_[i] = connect(port, source)
                open_[i].sendall(head)
            else:
                try:
                    sock.sendall(b"a")
                except OSError:
                    pass  # closed under us: select sees it next time
    for sock in open_:
        sock.close()
    return statuses


def login_cookie(url: str, name: str, password: str) -> tuple[str, str]:
    """(the session cookie's value, the whole Set-Cookie header) of a login with the form."""
    address = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    conn.request("POST", "/login", urllib.parse.urlencode({"name": name, "password": password}),
                 {"Content-Type": "application/x-www-form-urlencoded"})
    response = conn.getresponse()
    response.read()
    conn.close()
    header = response.getheader("Set-Cookie") or ""
    assert response.status == 303 and header.startswith("appliance_session="), (response.status, header)
    return header.split(";")[0].split("=", 1)[1], header


def open_streams(port: int, source: str, cookie: str, count: int) -> tuple[list[socket.socket], list[str]]:
    """``count`` event streams with one login: the sockets (to close) and the status each got."""
    socks, statuses = [], []
    for _ in range(count):
        sock = connect(port, source)
        sock.settimeout(10)
        sock.sendall(f"GET /api/stream HTTP/1.1\r\nHost: x\r\nCookie: appliance_session={cookie}\r\n\r\n".encode())
        socks.append(sock)
    for sock in socks:
        try:
            statuses.append(status_of(sock.recv(200) or b""))
        except ConnectionResetError:
            statuses.append("RESET")
    return socks, statuses
