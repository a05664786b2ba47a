"""A stand-in RTSP camera on loopback: GStreamer's gst-rtsp-server serving an H.264 file or a live pipeline.

gst-rtsp-server's Python binding (python3-gi) exists only for the system interpreter, so the server runs as a
separate ``/usr/bin/python3`` process, which is also what lets a caller SIGKILL it mid-stream and start it again
on the same port. Nothing here imports gi.

    with RtspServer(video) as server:          # started, ready to accept clients
        url = server.url                       # rtsp://127.0.0.1:<port>/cam
        server.kill()                          # SIGKILL, like a camera losing power
        server.start()                         # same port, same URL

    RtspServer(video, protocols=("tcp",))      # refuses RTP over UDP (SETUP answered 461), like some cameras
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from appliance.harness.ports import free_port
from appliance.procs import kill_process, stop_process

SYSTEM_PYTHON = "/usr/bin/python3"

# Runs under the system Python. Each client gets its own pipeline reading the file from the start;
# the file is served at its real frame rate and the stream ends (EOS) at the end of the file.
_SERVER = r"""
import sys
import gi
gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
gi.require_version("GstRtsp", "1.0")
from gi.repository import GLib, Gst, GstRtsp, GstRtspServer

port, mount, launch, protocols = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
Gst.init(None)
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(launch)
factory.set_shared(False)
if protocols:  # else the factory's default: UDP, UDP multicast and TCP (interleaved)
    names = {"tcp": GstRtsp.RTSPLowerTrans.TCP, "udp": GstRtsp.RTSPLowerTrans.UDP}
    allowed = GstRtsp.RTSPLowerTrans(0)
    for name in protocols.split(","):
        allowed |= names[name]
    factory.set_protocols(allowed)
server.get_mount_points().add_factory(mount, factory)
if server.attach(None) == 0:
    print("error: could not bind 127.0.0.1:" + port, flush=True)
    sys.exit(1)
print("ready", flush=True)
GLib.MainLoop().run()
"""


class RtspServer:
    """gst-rtsp-server serving ``video`` (an H.264 MP4) at rtsp://127.0.0.1:<port><mount>; ``launch``, a
    gst-rtsp-server launch line, serves that instead (a live test pattern never ends, a file does).

    ``protocols`` restricts the RTP transports the server accepts ("tcp": interleaved in the RTSP connection,
    "udp": unicast UDP); a client asking for another one gets 461 Unsupported Transport. None allows all.
    """

    def __init__(
        self,
        video: Path,
        *,
        port: int | None = None,
        mount: str = "/cam",
        launch: str | None = None,
        protocols: Iterable[str] | None = None,
    ) -> None:
        self.video = Path(video)
        self.protocols = tuple(protocols) if protocols is not None else ()
        unknown = set(self.protocols) - {"tcp", "udp"}
        if unknown or (protocols is not None and not self.protocols):
            raise ValueError(f"protocols must be a non-empty subset of ('tcp', 'udp'), got {protocols!r}")
        self.port = port or free_port()
        self.mount = mount
        self.launch = launch or (
            f'( filesrc location="{self.video}" ! qtdemux ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=1 )'
        )
        self._proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"rtsp://127.0.0.1:{self.port}{self.mount}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self, timeout: float = 20.0) -> "RtspServer":
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError(f"RTSP server already running (pid {self._proc.pid})")
        self._proc = subprocess.Popen(
            [SYSTEM_PYTHON, "-c", _SERVER, str(self.port), self.mount, self.launch, ",".join(self.protocols)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        deadline = time.monotonic() + timeout
        stdout = self._proc.stdout  # a pipe: "ready" once bound, or an error and exit
        line = stdout.readline() if stdout is not None else ""
        if line.strip() != "ready":
            self.kill()
            raise RuntimeError(f"RTSP server did not start on port {self.port}: {line.strip() or 'no output'}")
        while time.monotonic() < deadline:  # bound: make sure it accepts before handing out the URL
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"RTSP server on port {self.port} never accepted a connection")

    def kill(self) -> None:
        """SIGKILL the server, like a camera losing power; waits until it is gone."""
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_process(proc)
            if proc.stdout is not None:
                proc.stdout.close()

    def stop(self) -> None:
        """SIGTERM (and SIGCONT: a paused server must run to handle it); SIGKILL after 10 s."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout_s=10, resume=True)
            if proc.stdout is not None:
                proc.stdout.close()

    def pause(self) -> None:
        """SIGSTOP: connections stay open but no packet flows (a hung camera)."""
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self._proc is not None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def __enter__(self) -> "RtspServer":
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
