"""The RTSP server's passthrough ``/<camera>``: the camera's own H.264/H.265 packets, sent by its capture process
(appliance/capture/packets.py) over a Unix socket, put into ``appsrc ! h264parse ! rtph264pay`` (or H.265) with
no encoder. Runs in the RTSP server process (system Python, gi); standard library and gi only.

The capture process connects once (and again after a restart), says which camera it is and, for each container
it opens, the codec and parameter sets; then packets, only while this side says ``watch``. The mount's launch
follows the codec: a camera whose codec is neither (MPEG-4 part 2, MJPEG), or that has not said it yet, gets the
encoded ``/<camera>``.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gi.repository import Gst  # type: ignore[import-not-found, unused-ignore]

from appliance.framing import read_message
from appliance.restream.wire import watch_line

# codec (FFmpeg's name) -> caps, the framed stream format with codec_data, the parser and payloader
CODECS = {"h264": ("video/x-h264", "avc", "h264parse ! rtph264pay"),
          "hevc": ("video/x-h265", "hvc1", "h265parse ! rtph265pay")}


@dataclass
class Feed:
    conn: socket.socket
    codec: str = ""
    extradata: bytes = b""

    def caps(self) -> str:
        """avcC/hvcC parameter sets (from MP4/MKV files) go in the caps; Annex B ones (RTSP) before each keyframe."""
        media, framed, _ = CODECS[self.codec]
        if self.extradata[:1] == b"\x01":
            return f"{media},stream-format={framed},alignment=au,codec_data=(buffer){self.extradata.hex()}"
        return f"{media},stream-format=byte-stream,alignment=au"


class Passthrough:
    """The packet socket at ``path`` and the appsrc of each passthrough stream a client watches; ``tell`` sends a
    line to the supervisor (who watches, for its log and health)."""

    def __init__(self, path: str, tell: Callable[[bytes], None]) -> None:
        self._path, self._tell = path, tell
        self._lock = threading.Lock()
        self._feeds: dict[str, Feed] = {}
        self._sources: dict[str, Any] = {}
        self._mounts: dict[str, tuple[Any, str]] = {}  # camera -> (its /<camera> factory, the encoded launch)

    def listen(self) -> None:
        if os.path.exists(self._path):
            os.unlink(self._path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self._path)
        listener.listen(16)
        threading.Thread(target=self._accept, args=(listener,), name="packets", daemon=True).start()

    def mount(self, camera: str, factory: Any, encoded: str) -> None:
        """``factory`` serves the camera's /<camera>: encoded (``encoded``, its launch until the capture process
        says its codec), or passthrough once it says H.264/H.265. A running stream keeps its pipeline; the next
        first client gets the launch of the codec announced last."""
        factory.set_launch(encoded)
        self._mounts[camera] = (factory, encoded)

    def _follow_codec(self, camera: str, codec: str) -> None:
        factory, encoded = self._mounts[camera]
        if codec not in CODECS:
            print(f"restream: /{camera} is encoded from frames: its codec is {codec} (passthrough carries "
                  "H.264/H.265 only)", file=sys.stderr, flush=True)
            factory.set_launch(encoded)
            return
        factory.set_launch(f"( appsrc name=packets is-live=true format=time do-timestamp=true max-bytes=8000000"
                           f" ! {CODECS[codec][2]} name=pay0 pt=96 config-interval=-1 )")

    def configure(self, media: Any, camera: str) -> None:
        """A first client: the appsrc gets the codec's caps, the capture process starts sending."""
        source = media.get_element().get_by_name("packets")
        with self._lock:
            feed = self._feeds.get(camera)
            if feed is None:
                return
            source.set_property("caps", Gst.Caps.from_string(feed.caps()))
            self._sources[camera] = source
            self._send(feed, watch_line(True, camera, "raw"))
        self._tell(watch_line(True, camera, "passthrough"))
        media.connect("target-state", self._target_state, camera, source)
        media.connect("unprepared", lambda _media, *args: self._stop(*args), camera, source)

    def _target_state(self, _media: Any, state: int, camera: str, source: Any) -> None:
        if state == Gst.State.NULL:  # about to be taken down: no push may reach its appsrc from now
            self._stop(camera, source)

    def _stop(self, camera: str, source: Any) -> None:
        with self._lock:
            if self._sources.get(camera) is not source:
                return
            del self._sources[camera]
            feed = self._feeds.get(camera)
            if feed is not None:
                self._send(feed, watch_line(False, camera, "raw"))
        self._tell(watch_line(False, camera, "passthrough"))

    @staticmethod
    def _send(feed: Feed, line: bytes) -> None:
        try:
            feed.conn.sendall(line)
        except OSError:
            pass  # the capture process went away; it says who it is again when it reconnects

    def _accept(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=self._serve, args=(conn,), name="feed", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        first = read_message(conn)
        if first is None:
            conn.close()
            return
        camera, feed = str(first[0]["camera"]), Feed(conn)
        while (message := read_message(conn)) is not None:
            header, data = message
            if "codec" in header:
                with self._lock:
                    changed = header["codec"] != feed.codec
                    feed.codec, feed.extradata = header["codec"], bytes.fromhex(header["extradata"])
                    self._feeds[camera] = feed
                if changed and camera in self._mounts:
                    self._follow_codec(camera, feed.codec)
            else:
                self._push(camera, feed, bool(header["key"]), data)
        with self._lock:
            gone = self._feeds.get(camera) is feed
            if gone:
                del self._feeds[camera]
        if gone and camera in self._mounts:  # until a capture process says its codec again
            self._mounts[camera][0].set_launch(self._mounts[camera][1])
        conn.close()

    def _push(self, camera: str, feed: Feed, key: bool, data: bytearray) -> None:
        with self._lock:  # held while pushing: a stream being taken down waits for it
            source = self._sources.get(camera)
            if source is None:
                return
            if key and feed.extradata[:1] not in (b"\x01", b""):
                data = bytearray(feed.extradata) + data  # Annex B parameter sets before each keyframe
            source.emit("push-buffer", Gst.Buffer.new_wrapped(bytes(data)))
