"""The RTSP server process: gst-rtsp-server with one shared media factory per camera and kind, fed the frames the
supervisor sends, or (appliance/restream/passthrough.py) a compressed camera's own packets. Runs under the system
Python (python3-gi has no wheel for the venv), started by :class:`appliance.restream.server.RestreamServer`;
imports only the standard library, gi and stdlib-only parts of the package.

    /usr/bin/python3 -m appliance.restream.gstserver <socket fd>    # its settings as JSON on stdin
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import sys
import threading
import time
from fractions import Fraction
from typing import Any

import gi  # type: ignore[import-not-found, unused-ignore]

gi.require_version("Gst", "1.0")
gi.require_version("GstRtsp", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtsp, GstRtspServer  # type: ignore[import-not-found, unused-ignore]  # noqa: E402

from appliance.passwords import verify_password  # noqa: E402
from appliance.restream.passthrough import Passthrough  # noqa: E402
from appliance.restream.wire import read_frame, watch_line  # noqa: E402

# The Jetson's NVENC wants NVMM memory: nvvidconv copies the frame there once. x264 with one thread makes one
# slice per frame: with zerolatency's sliced threads, ffmpeg's RTSP client showed only one slice of each frame.
ENCODERS = {
    "nvv4l2": ("nvv4l2h264enc", "videoconvert ! video/x-raw,format=BGRx ! nvvidconv ! "
               "video/x-raw(memory:NVMM),format=NV12 ! nvv4l2h264enc bitrate={bps} iframeinterval={gop} "
               "idrinterval={gop} insert-sps-pps=true maxperf-enable=true"),
    "x264": ("x264enc", "videoconvert ! video/x-raw,format=I420 ! x264enc tune=zerolatency speed-preset=ultrafast "
             "threads=1 bitrate={kbps} key-int-max={gop} ! video/x-h264,profile=constrained-baseline"),
    "openh264": ("openh264enc", "videoconvert ! video/x-raw,format=I420 ! openh264enc bitrate={bps} "
                 "gop-size={gop}"),
}
CREDENTIALS_S = 60.0  # a checked login is trusted this long: clients send it with every request


def pick_encoder(name: str) -> str:
    """The encoder named, or for "cpu" (the supervisor's device choice: appliance.capture.h264encoders) x264,
    else openh264; raises RuntimeError when the one asked for is missing."""
    def present(key: str) -> bool:
        return Gst.ElementFactory.find(ENCODERS[key][0]) is not None
    if name != "cpu":
        if not present(name):
            raise RuntimeError(f"restream.encoder {name}: GStreamer has no {ENCODERS[name][0]} element here")
        return name
    for key in ("x264", "openh264"):
        if present(key):
            return key
    raise RuntimeError("restream: no H.264 encoder for the CPU (x264enc or openh264enc) in GStreamer")


class UserAuth(GstRtspServer.RTSPAuth):
    """Basic auth over the page's users, checked with the page's own password function; every role may watch."""

    def __init__(self, users: dict[str, str]) -> None:
        super().__init__()
        self._users = users
        self._good: dict[tuple[str, str], float] = {}  # (user, sha256 of the password) -> trusted until

    def _allowed(self, header: str | None) -> bool:
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            name, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
        except ValueError:
            return False
        key = (name, hashlib.sha256(password.encode()).hexdigest())
        if self._good.get(key, 0.0) > time.monotonic():
            return True
        stored = self._users.get(name)
        if stored is None or not verify_password(password, stored):
            print(f"restream: refused a login as {name!r}", file=sys.stderr, flush=True)
            return False
        self._good[key] = time.monotonic() + CREDENTIALS_S
        return True

    def do_check(self, ctx: Any, check: str) -> bool:
        if check != GstRtspServer.RTSP_AUTH_CHECK_URL:
            return True  # the URL check runs first on every request
        _, header = ctx.request.get_header(GstRtsp.RTSPHeaderField.AUTHORIZATION, 0)
        if self._allowed(header):
            return True
        code = GstRtsp.RTSPStatusCode.UNAUTHORIZED
        # new_response, not init_response: a message PyGObject allocated itself is freed by gst_rtsp_message_free
        # with another allocator, which corrupted the heap (the server crashed a few requests later)
        _, response = GstRtsp.rtsp_message_new_response(code, GstRtsp.rtsp_status_as_text(code), ctx.request)
        response.add_header(GstRtsp.RTSPHeaderField.WWW_AUTHENTICATE, 'Basic realm="appliance"')
        ctx.client.send_message(ctx.session, response)
        return False


class Streams:
    """The appsrc of every stream a client watches, and the newest frame the supervisor sent for it."""

    def __init__(self, sock: socket.socket, fps: float) -> None:
        self._sock, self._fps = sock, Fraction(fps).limit_denominator(1000)
        self._lock = threading.Lock()
        self._sources: dict[tuple[str, str], Any] = {}
        self._latest: dict[tuple[str, str], tuple[str, bytes]] = {}
        self._caps: dict[tuple[str, str], str] = {}

    def configure(self, _factory: Any, media: Any, camera: str, kind: str) -> None:
        """A first client asked for the stream: keep its appsrc, tell the supervisor to send frames."""
        source = media.get_element().get_by_name("src")
        with self._lock:
            self._sources[(camera, kind)] = source
            self._caps.pop((camera, kind), None)
            self._sock.sendall(watch_line(True, camera, kind))
        media.connect("target-state", self._target_state, camera, kind, source)
        media.connect("unprepared", lambda _media, *key_source: self._stop(*key_source), camera, kind, source)

    def tell(self, line: bytes) -> None:
        """A line to the supervisor (the passthrough's watch lines share the socket)."""
        with self._lock:
            self._sock.sendall(line)

    def _target_state(self, _media: Any, state: int, camera: str, kind: str, source: Any) -> None:
        """The media is about to be taken down (the last client left): no push may reach its appsrc from now."""
        if state == Gst.State.NULL:
            self._stop(camera, kind, source)

    def _stop(self, camera: str, kind: str, source: Any) -> None:
        """The supervisor stops drawing and sending for the stream (once, whichever signal came first; never for
        a newer media of the same stream, which a client may have started meanwhile)."""
        with self._lock:
            if self._sources.get((camera, kind)) is source:
                del self._sources[(camera, kind)]
                self._latest.pop((camera, kind), None)
                self._sock.sendall(watch_line(False, camera, kind))

    def read(self) -> None:
        """The supervisor's frames, until it closes the socket (then this process ends)."""
        while (frame := read_frame(self._sock)) is not None:
            header, pixels = frame
            caps = (f"video/x-raw,format={header['format'].upper()},width={header['width']},"
                    f"height={header['height']},framerate={self._fps.numerator}/{self._fps.denominator}")
            with self._lock:
                key = (header["camera"], header["kind"])
                if key in self._sources:
                    self._latest[key] = (caps, bytes(pixels))
        os._exit(0)

    def push(self) -> None:
        """Every stream's newest frame, ``fps`` times a second, so a client sees the configured rate."""
        period = 1.0 / float(self._fps)
        due = time.monotonic()
        while True:
            due += period
            with self._lock:  # held while pushing: a stream being taken down waits (appsrc is leaky: no block)
                for key, (caps, data) in self._latest.items():
                    source = self._sources[key]
                    if self._caps.get(key) != caps:
                        source.set_property("caps", Gst.Caps.from_string(caps))
                        self._caps[key] = caps
                    source.emit("push-buffer", Gst.Buffer.new_wrapped(data))  # a fresh buffer: appsrc stamps it
            time.sleep(max(0.0, due - time.monotonic()))
            due = max(due, time.monotonic() - period)  # a stall costs frames, not a burst


def _configure(factory: Any, media: Any, camera: str, streams: Streams, passthrough: Passthrough) -> None:
    """A passthrough camera's /<camera> got its first client: packets, or frames when it fell back to encoding."""
    if media.get_element().get_by_name("packets") is not None:
        passthrough.configure(media, camera)
    else:
        streams.configure(factory, media, camera, "raw")


def build_server(settings: dict[str, Any], streams: Streams, encoder: str, passthrough: Passthrough) -> Any:
    gop = max(1, round(settings["fps"]))  # a keyframe every second: a new client's picture starts within it
    encode = ENCODERS[encoder][1].format(kbps=settings["bitrate_kbps"], bps=settings["bitrate_kbps"] * 1000,
                                         gop=gop)
    launch = (f"( appsrc name=src is-live=true format=time do-timestamp=true max-buffers=2 leaky-type=downstream"
              f" ! {encode} ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=-1 )")
    server = GstRtspServer.RTSPServer()
    server.set_address(settings["host"])
    server.set_service(str(settings["port"]))
    for camera in settings["cameras"]:
        for kind in settings["kinds"]:
            factory = GstRtspServer.RTSPMediaFactory()
            if kind == "raw" and camera in settings["passthrough"]:
                passthrough.mount(camera, factory, launch)
                factory.connect("media-configure", _configure, camera, streams, passthrough)
            else:
                factory.set_launch(launch)
                factory.connect("media-configure", streams.configure, camera, kind)
            factory.set_shared(True)  # every client of a stream shares one pipeline and one encoder
            server.get_mount_points().add_factory(f"/{camera}" if kind == "raw" else f"/{camera}/{kind}", factory)
    if settings["users"] is not None:
        server.set_auth(UserAuth(settings["users"]))
    return server


def main(argv: list[str]) -> int:
    settings = json.loads(sys.stdin.read())
    sock = socket.socket(fileno=int(argv[1]))
    Gst.init(None)
    try:
        encoder = pick_encoder(settings["encoder"])
    except RuntimeError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    streams = Streams(sock, settings["fps"])
    passthrough = Passthrough(settings["packets"], streams.tell)
    if settings["passthrough"]:
        passthrough.listen()
    server = build_server(settings, streams, encoder, passthrough)
    if server.attach(None) == 0:
        print(f"error: could not bind {settings['host']}:{settings['port']}", flush=True)
        return 1
    threading.Thread(target=streams.read, name="frames", daemon=True).start()
    threading.Thread(target=streams.push, name="push", daemon=True).start()
    print(f"ready {encoder} {server.get_bound_port()}", flush=True)
    GLib.MainLoop().run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
