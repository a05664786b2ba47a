"""What one client may hold of the real HTTP endpoint (appliance.health.limits): a held body is cut after the
deadline, a body over the limit is refused before it is read, page requests past the per-client cap get 429, and
all the while /healthz answers another client at once. The page is a real Starlette route that holds its request."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import urllib.request

import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from support.wait import wait_until
from support.webattack import answer

from appliance.health import limits
from appliance.health.server import HealthServer


def _healthz(port: int, source: str = "127.0.0.1") -> int:
    """/healthz from ``source`` (any 127.x address is this machine): the poller is another client than the attacker."""
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        return int(sock.recv(64).split()[1])


def _attacker(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.2", 0))


@pytest.fixture
def server() -> HealthServer:
    released = threading.Event()

    async def hold(_request: Request) -> Response:  # a page request that stays open, as an event stream does
        while not released.is_set():
            await asyncio.sleep(0.05)
        return PlainTextResponse("done")

    async def echo(request: Request) -> Response:
        return PlainTextResponse(str(len(await request.body())))

    server = HealthServer("127.0.0.1", 0, lambda: b"", lambda: {"ok": True},
                          routes=[Route("/hold", hold), Route("/echo", echo, methods=["POST"])])
    yield server
    released.set()
    server.close()


def test_a_held_body_is_cut_after_the_deadline_and_health_answers_meanwhile(
        server: HealthServer, caplog: pytest.LogCaptureFixture) -> None:
    slow = [_attacker(server.port) for _ in range(limits.PAGE_PER_CLIENT + 4)]  # past the page's cap
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="appliance.health.server"):
        for sock in slow:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nn")
        codes = [_healthz(server.port) for _ in range(10)]
        answers = [answer(sock) for sock in slow]  # each ends with the server closing the connection
    elapsed = time.monotonic() - started
    assert codes == [200] * 10
    statuses = sorted(int(a.split()[1]) for a in answers)
    assert statuses.count(408) == limits.PAGE_PER_CLIENT and statuses.count(429) == 4, statuses
    assert limits.BODY_DEADLINE_S <= elapsed < limits.BODY_DEADLINE_S + 5
    lines = [r.getMessage() for r in caplog.records]
    assert sum("slow request body from 127.0.0.2" in line for line in lines) == 1, lines  # once per burst
    assert sum("over the limit from 127.0.0.2" in line for line in lines) == 1, lines
    for sock in slow:
        sock.close()


def test_a_large_body_is_refused_before_it_is_read(server: HealthServer) -> None:
    with _attacker(server.port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
        reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 413") and len(reply) < 500
    assert json.loads(reply.split(b"\r\n\r\n")[1]) == {"error": "request body too large: at most 262144 bytes"}
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/echo", data=b"x" * 1000, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read() == b"1000"


def test_held_page_requests_and_connections_from_one_client_leave_health_alone(server: HealthServer) -> None:
    held = []
    for _ in range(40):  # more than the page's cap and more than one address may connect
        sock = _attacker(server.port)
        sock.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        held.append(sock)
    try:
        answers = [answer(sock) for sock in held[limits.PAGE_PER_CLIENT:]]  # the ones past the caps, at once
        assert all(a.startswith((b"HTTP/1.1 429", b"HTTP/1.0 503", b"RESET")) for a in answers), answers
        assert sum(a.startswith(b"HTTP/1.1 429") for a in answers) >= 1, answers
        assert [_healthz(server.port) for _ in range(5)] == [200] * 5
        assert _healthz(server.port, source="127.0.0.3") == 200
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: _healthz(server.port, source="127.0.0.2") == 200, 10, 0.1, "the attacker's slots freed")
