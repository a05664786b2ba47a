"""Where a compressed source's demuxed packets go, besides its decoder: the segment recorder (clips) and the
RTSP server's passthrough ``/<camera>`` (the camera's own H.264/H.265, no re-encode). :class:`PacketFanout` is
what the source (capture/sources/pyav.py) hands every packet to; each sink must not block the source.

:class:`RestreamFeed` connects to the RTSP server's packet socket (appliance/restream/gstserver.py) and sends
packets only while ``/<camera>`` has a client: the server says ``watch``/``unwatch`` on the same connection.
Unwatched, a packet costs one attribute check. A watched stream starts at a keyframe; a full queue (a stalled
server) drops packets up to the next keyframe, never blocks decoding.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
from typing import Any, Protocol

from appliance.framing import send_message

log = logging.getLogger(__name__)

QUEUE_PACKETS = 120
RECONNECT_S = 1.0


class PacketSink(Protocol):
    def offer(self, packet: Any, wall: float) -> None: ...


class Releaser(Protocol):
    def release(self, container: Any) -> None: ...


class PacketFanout:
    """Every packet to each sink in turn (a sink that copies its bytes comes before the recorder, which keeps
    the packet itself); the container is closed by ``releaser`` (the recorder: once its packets are written)."""

    def __init__(self, sinks: list[PacketSink], releaser: Releaser | None = None) -> None:
        self.sinks, self._releaser = sinks, releaser

    def offer(self, packet: Any, wall: float) -> None:
        for sink in self.sinks:
            sink.offer(packet, wall)

    def release(self, container: Any) -> None:
        if self._releaser is not None:
            self._releaser.release(container)
        else:
            container.close()


class RestreamFeed:
    """The camera's packets to the RTSP server at ``address`` (a Unix socket path) while a client watches."""

    def __init__(self, address: str, camera_id: str) -> None:
        self.address, self.camera_id = address, camera_id
        self.watched = False
        self.sent = self.dropped = 0
        self._queue: queue.Queue[tuple[dict[str, Any], bytes]] = queue.Queue(QUEUE_PACKETS)
        self._need_key = True
        self._stream: Any = None
        self._running = True
        self._thread = threading.Thread(target=self._run, name=f"restream-{camera_id}", daemon=True)

    def start(self) -> RestreamFeed:
        self._thread.start()
        return self

    def offer(self, packet: Any, wall: float) -> None:
        stream = packet.stream
        if stream is not self._stream:  # a new connection or container: the server needs its codec (which
            context = stream.codec_context  # picks the mount's pipeline) and parameter sets, watched or not
            self._put({"codec": context.name, "extradata": bytes(context.extradata or b"").hex()}, b"")
            self._stream = stream
        if not self.watched:
            self._need_key = True
            return
        if self._need_key and not packet.is_keyframe:
            return
        self._need_key = not self._put({"key": bool(packet.is_keyframe)}, bytes(packet))

    def _put(self, header: dict[str, Any], data: bytes) -> bool:
        try:
            self._queue.put_nowait((header, data))
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def _run(self) -> None:
        while self._running:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.connect(self.address)
                    send_message(sock, {"camera": self.camera_id})
                    threading.Thread(target=self._follow, args=(sock,), name="restream-watch", daemon=True).start()
                    self._send(sock)
            except OSError:
                pass  # the server is not up yet, or went away: try again
            self.watched, self._stream = False, None
            time.sleep(RECONNECT_S)

    def _send(self, sock: socket.socket) -> None:
        while self._running:
            try:
                header, data = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            send_message(sock, header, data)
            self.sent += "key" in header

    def _follow(self, sock: socket.socket) -> None:
        """The server's watch/unwatch lines for this camera's ``/<camera>``."""
        try:
            for raw in sock.makefile("rb"):
                watching = "watch" in json.loads(raw)
                if watching != self.watched:
                    log.info("restream: /%s has a client: sending the camera's packets" if watching
                             else "restream: /%s has no client left: packets stopped", self.camera_id)
                self.watched = watching
        except (OSError, ValueError):
            pass
        self.watched = False
        try:
            sock.shutdown(socket.SHUT_RDWR)  # the sender sees it and reconnects
        except OSError:
            pass

    def stop(self) -> None:
        self._running = False
        self._thread.join(2.0)
