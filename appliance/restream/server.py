"""The supervisor's handle on the RTSP server process (:mod:`appliance.restream.gstserver`): started with its
settings and the page's users, it says which streams have a client; frames go to it over a socket pair."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from appliance.capture.h264encoders import device_encoder_element
from appliance.errors import ApplianceError
from appliance.passwords import hash_password
from appliance.procs import stop_process
from appliance.restream.config import RestreamConfig
from appliance.restream.wire import send_frame

log = logging.getLogger(__name__)
SYSTEM_PYTHON = "/usr/bin/python3"  # python3-gi exists only for it
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class RestreamStartError(ApplianceError, RuntimeError):
    """The RTSP server did not come up (no encoder, port taken, no python3-gi); the message says which."""


PAGE_USER = "_page"  # the page's own login: no configured user can have this name (web.UserConfig's pattern)


class RestreamServer:
    """``users``: name -> scrypt hash, whose Basic logins are let in; None: no login (bound to loopback). With
    users, the page gets a login of its own, a random password made here and kept in memory only."""

    def __init__(self, config: RestreamConfig, host: str, cameras: Sequence[str],
                 users: dict[str, str] | None, *, python: str = SYSTEM_PYTHON, packets: Path | None = None,
                 passthrough: Sequence[str] = ()) -> None:
        self.config, self.host, self.cameras, self._python = config, host, list(cameras), python
        self.packets, self.passthrough = packets, list(passthrough)  # the capture processes' packet socket
        self._page_password = secrets.token_urlsafe(24)
        self.users = None if users is None else {**users, PAGE_USER: hash_password(self._page_password)}
        self.encoder = ""
        self.port = config.port
        self._proc: subprocess.Popen[str] | None = None
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        # camera -> kinds with a client ("raw", "annotated", "passthrough"); replaced, never mutated
        self.watched: dict[str, frozenset[str]] = {}
        self.encoders_started = 0  # pipelines built for a first client (every later client shares one)

    def start(self, timeout_s: float = 30.0) -> RestreamServer:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        settings = {"host": self.host, "port": self.config.port, "cameras": self.cameras, "users": self.users,
                    "kinds": ["raw", "annotated"] if self.config.annotated else ["raw"], "fps": self.config.fps,
                    "bitrate_kbps": self.config.bitrate_kbps, "encoder": self._encoder(),
                    "packets": str(self.packets or ""), "passthrough": self.passthrough}
        env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
        try:
            proc = subprocess.Popen([self._python, "-m", "appliance.restream.gstserver", str(theirs.fileno())],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                    pass_fds=[theirs.fileno()])
        except OSError as exc:
            raise RestreamStartError(f"restream: cannot run {self._python}: {exc}") from exc
        finally:
            theirs.close()
        self._proc, self._sock = proc, ours
        assert proc.stdin is not None and proc.stdout is not None  # both are pipes
        proc.stdin.write(json.dumps(settings))
        proc.stdin.close()
        line = _readline(proc, timeout_s).split()
        if line[:1] != ["ready"]:
            self.stop()
            raise RestreamStartError(f"restream: the RTSP server did not start: {' '.join(line) or 'no output'}")
        self.encoder, self.port = line[1], int(line[2])
        threading.Thread(target=self._read_watchers, name="restream-watchers", daemon=True).start()
        log.info("restream: rtsp://%s:%d/<camera>[/annotated], encoder %s, %s", self.host, self.port, self.encoder,
                 "no login: loopback only" if self.users is None else "login required")
        return self

    def _encoder(self) -> str:
        """The configured encoder; for "auto", the device's choice (the recorder's too): NVENC where the device
        has it, else "cpu" (the server takes x264enc, else openh264enc)."""
        if self.config.encoder != "auto":
            return self.config.encoder
        return "nvv4l2" if device_encoder_element() is not None else "cpu"

    def local_url(self, camera: str, kind: str = "annotated") -> str:
        """The stream's URL for this machine's own clients (the page's video), with the page's login if needed."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}.get(self.host, self.host)
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        login = f"{PAGE_USER}:{self._page_password}@" if self.users is not None else ""
        return f"rtsp://{login}{host}:{self.port}/{camera}" + ("" if kind == "raw" else f"/{kind}")

    def _read_watchers(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            self._follow(sock)
        except (OSError, ValueError):  # stop() closed the socket
            pass
        self.watched = {}
        proc = self._proc
        if proc is not None:  # not stop(): the server went away by itself
            log.error("restream: the RTSP server process ended (exit code %s); no restream until the appliance "
                      "restarts", proc.wait())

    def _follow(self, sock: socket.socket) -> None:
        """The server's word on each stream that gets its first client or loses its last one."""
        for raw in sock.makefile("rb"):
            message = json.loads(raw)
            watching = "watch" in message
            camera, kind = message["watch"] if watching else message["unwatch"]
            kinds = self.watched.get(camera, frozenset())
            kinds = kinds | {kind} if watching else kinds - {kind}
            watched = dict(self.watched)
            if kinds:
                watched[camera] = kinds
            else:
                watched.pop(camera, None)
            self.watched = watched  # one assignment: the frame path's lookup never sees half a change
            if kind == "passthrough":
                log.info("restream: %s %s", camera, "has a client: the camera's own packets, no encoder"
                         if watching else "has no client left: packets stopped")
                continue
            self.encoders_started += watching
            log.info("restream: %s/%s %s", camera, kind, "has a client: encoding" if watching
                     else "has no client left: encoder stopped")

    def send(self, camera: str, kind: str, width: int, height: int, pixel_format: str,
             pixels: bytes | memoryview) -> None:
        sock = self._sock
        if sock is None:
            return
        with self._send_lock:
            send_frame(sock, camera, kind, width, height, pixel_format, pixels)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if proc is not None:
            stop_process(proc, timeout_s=5)
            if proc.stdout is not None:
                proc.stdout.close()
        if self.packets is not None and self.passthrough:
            self.packets.unlink(missing_ok=True)  # the server made it; the ring folder must end empty
        self.watched = {}


def _readline(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The server's first line ("ready <encoder> <port>" or "error: ..."); "" if it printed none in time."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(proc.stdout.readline() if proc.stdout else ""),
                              daemon=True)
    reader.start()
    reader.join(timeout_s)
    return found[0].strip() if found else ""
