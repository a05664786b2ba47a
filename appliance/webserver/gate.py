"""The connection caps and the time to send a request's head, applied to each TCP connection before HTTP: a
connection past ``connections_total`` (or past ``connections_per_client`` from its address) is answered a plain
``503 busy`` and closed before it sends anything, and one that has not sent a whole request head within
``head_timeout_s`` is hung up on.

``gated(protocol, limits)`` is the protocol class uvicorn is given through its ``http`` option: each connection
gets a gate that owns one uvicorn HTTP protocol (built as uvicorn builds it) and hands it every event of the
connection it lets through. The gate reads only bytes and the asyncio protocol interface, nothing of uvicorn's."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from appliance.webserver.limits import Limits

log = logging.getLogger(__name__)

BUSY = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy\n"
_HEAD_END = b"\r\n\r\n"


class _Connections:
    """The connections open now, per client address."""

    def __init__(self) -> None:
        self.total = 0
        self.by_address: dict[str, int] = {}

    def add(self, address: str) -> None:
        self.total += 1
        self.by_address[address] = self.by_address.get(address, 0) + 1

    def remove(self, address: str) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if not self.by_address[address]:
            del self.by_address[address]


def gated(protocol: type[asyncio.Protocol], limits: Limits) -> type[asyncio.Protocol]:
    """A protocol class (for ``uvicorn.Config(http=...)``) whose connections pass the caps of ``limits`` before
    ``protocol`` (uvicorn's HTTP/1.1 implementation) serves them. One count of connections per class: build one
    per server."""
    open_now = _Connections()

    class Gate(asyncio.Protocol):
        def __init__(self, **uvicorn_args: Any) -> None:
            self._inner: asyncio.Protocol = protocol(**uvicorn_args)
            self._address: str | None = None
            self._transport: asyncio.BaseTransport | None = None
            self._head_timer: asyncio.TimerHandle | None = None
            self._tail = b""  # the last bytes of the first request head seen so far

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            peer = transport.get_extra_info("peername")
            self._address = address = str(peer[0]) if peer else "?"
            open_now.add(address)
            self._transport = transport
            if open_now.total > limits.connections_total \
                    or open_now.by_address[address] > limits.connections_per_client:
                log.debug("http server busy (%d connections, %d from %s); turning one away", open_now.total,
                          open_now.by_address[address], address)
                assert isinstance(transport, asyncio.WriteTransport)  # a stream socket's transport
                transport.write(BUSY)
                transport.close()
                self._inner = asyncio.Protocol()  # the refused connection reaches no HTTP code
                return
            self._head_timer = asyncio.get_running_loop().call_later(limits.head_timeout_s, self._too_slow)
            self._inner.connection_made(transport)

        def _too_slow(self) -> None:
            if self._transport is not None and not self._transport.is_closing():
                self._transport.close()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is not None:
                seen = self._tail + data
                if _HEAD_END in seen:
                    self._head_timer.cancel()
                    self._head_timer = None
                else:
                    self._tail = seen[-(len(_HEAD_END) - 1):]
            self._inner.data_received(data)

        def eof_received(self) -> bool | None:
            return self._inner.eof_received()

        def pause_writing(self) -> None:
            self._inner.pause_writing()

        def resume_writing(self) -> None:
            self._inner.resume_writing()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            if self._address is not None:
                open_now.remove(self._address)
                self._address = None
            self._inner.connection_lost(exc)

    return Gate
