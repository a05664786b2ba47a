"""What one client may hold of the real HTTP server (appliance.webserver.limits): a held body is cut after the
deadline, a body over the limit is refused before it is read, requests past the per-client cap get 429, streams
have a cap of their own and outlast the deadline meant for bodies, and all the while /healthz answers another
client at once. The page is a real Starlette route that holds its request, the stream one that holds its
response."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from support.httpclient import request
from support.wait import wait_until
from support.webattack import answer

from appliance.health.routes import health_routes
from appliance.webserver import limits
from appliance.webserver.routes import Routes
from appliance.webserver.server import WebServer


def _healthz(port: int, source: str = "127.0.0.1") -> int:
    """/healthz from ``source`` (any 127.x address is this machine): the poller is another client than the attacker."""
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        return int(sock.recv(64).split()[1])


def _attacker(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.2", 0))


def _serve(released: threading.Event, held: limits.Limits = limits.Limits()) -> WebServer:
    """The health routes, ``/hold`` (a request that stays open), ``/echo`` (POST: its body's length) and the stream
    ``/feed`` (a line every 50 ms) until ``released``."""

    async def hold(_request: Request) -> Response:
        while not released.is_set():
            await asyncio.sleep(0.05)
        return PlainTextResponse("done")

    async def echo(request: Request) -> Response:
        return PlainTextResponse(str(len(await request.body())))

    async def ticks() -> AsyncIterator[bytes]:
        while not released.is_set():
            yield b"tick\n"
            await asyncio.sleep(0.05)

    async def feed(_request: Request) -> Response:
        return StreamingResponse(ticks(), media_type="text/plain")

    routes = health_routes(lambda: b"", lambda: {"ok": True}) + Routes.of(
        requests=[Route("/hold", hold), Route("/echo", echo, methods=["POST"])], streams=[Route("/feed", feed)])
    return WebServer("127.0.0.1", 0, routes, limits=held)


@pytest.fixture
def server() -> Iterator[WebServer]:
    released = threading.Event()
    server = _serve(released)
    yield server
    released.set()
    server.close()


def test_a_held_body_is_cut_after_the_deadline_and_health_answers_meanwhile(
        server: WebServer, caplog: pytest.LogCaptureFixture) -> None:
    slow = [_attacker(server.port) for _ in range(limits.REQUESTS_PER_CLIENT + 4)]  # past the page's cap
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="appliance.webserver.limits"):
        for sock in slow:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nn")
        codes = [_healthz(server.port) for _ in range(10)]
        answers = [answer(sock) for sock in slow]  # each ends with the server closing the connection
    elapsed = time.monotonic() - started
    assert codes == [200] * 10
    statuses = sorted(int(a.split()[1]) for a in answers)
    assert statuses.count(408) == limits.REQUESTS_PER_CLIENT and statuses.count(429) == 4, statuses
    assert limits.BODY_DEADLINE_S <= elapsed < limits.BODY_DEADLINE_S + 5
    lines = [r.getMessage() for r in caplog.records]
    assert sum("slow request body from 127.0.0.2" in line for line in lines) == 1, lines  # once per burst
    assert sum("over the limit from 127.0.0.2" in line for line in lines) == 1, lines
    for sock in slow:
        sock.close()


def test_a_large_body_is_refused_before_it_is_read(server: WebServer) -> None:
    with _attacker(server.port) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
        reply = answer(sock)
    assert reply.startswith(b"HTTP/1.1 413") and len(reply) < 500
    assert json.loads(reply.split(b"\r\n\r\n")[1]) == {"error": "request body too large: at most 262144 bytes"}
    echoed = request(f"http://127.0.0.1:{server.port}/echo", method="POST", body=b"x" * 1000, expect=200)
    assert echoed.body == b"1000"


def test_held_page_requests_and_connections_from_one_client_leave_health_alone(server: WebServer) -> None:
    held = []
    for _ in range(40):  # more than the page's cap and more than one address may connect
        sock = _attacker(server.port)
        sock.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        held.append(sock)
    try:
        answers = [answer(sock) for sock in held[limits.REQUESTS_PER_CLIENT:]]  # the ones past the caps, at once
        assert all(a.startswith((b"HTTP/1.1 429", b"HTTP/1.0 503", b"RESET")) for a in answers), answers
        assert sum(a.startswith(b"HTTP/1.1 429") for a in answers) >= 1, answers
        assert [_healthz(server.port) for _ in range(5)] == [200] * 5
        assert _healthz(server.port, source="127.0.0.3") == 200
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: _healthz(server.port, source="127.0.0.2") == 200, 10, 0.1, "the attacker's slots freed")



def _get_from_attacker(port: int, path: str) -> socket.socket:
    sock = _attacker(port)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def test_streams_have_their_own_cap_and_outlast_the_body_deadline() -> None:
    released = threading.Event()
    caps = limits.Limits(requests_per_client=2, streams_per_client=2, body_deadline_s=0.3)
    server = _serve(released, caps)
    streams = [_get_from_attacker(server.port, "/feed") for _ in range(2)]
    try:
        assert all(sock.recv(4096).startswith(b"HTTP/1.1 200") for sock in streams)  # both open
        with _get_from_attacker(server.port, "/feed") as third:
            reply = answer(third)
        assert reply.startswith(b"HTTP/1.1 429"), reply  # past the streams' cap: refused at once
        assert json.loads(reply.split(b"\r\n\r\n")[1]) == {
            "error": "too many streams open from this address: close a view or a download"}
        with _attacker(server.port) as sock:  # the open streams take no request's place: a request is served
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 10\r\n\r\n"
                         + b"x" * 10)
            reply = answer(sock)
        assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"\r\n\r\n10"), reply
        time.sleep(caps.body_deadline_s * 3)
        streams[0].setblocking(False)
        assert b"tick" in streams[0].recv(65536)  # still streaming well past the deadline meant for bodies
    finally:
        released.set()
        for sock in streams:
            sock.close()
        server.close()
