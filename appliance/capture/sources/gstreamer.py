"""Any GStreamer pipeline, run by ``gst-launch-1.0`` in a child process that writes raw frames to a pipe.

The pip OpenCV wheels are built without GStreamer, so instead of ``cv2.CAP_GSTREAMER`` the capture
appends ``videoconvert ! video/x-raw,format=BGR,width=W,height=H ! fdsink fd=1`` and reads exactly one
frame's bytes at a time, straight into the ring slot. This works the same on a Jetson
(``nvarguscamerasrc``, ``aravissrc``) as on a CI host (``videotestsrc``), and a hung pipeline can be
killed without taking the capture process down.
"""

from __future__ import annotations

import io
import logging
import shlex
import shutil
import subprocess
import tempfile
from typing import IO, TYPE_CHECKING, NoReturn, cast

import numpy as np

from appliance.capture.sources.base import EndOfStream, FrameShape, FrameSource, SourceConfigError
from appliance.config.redact import redact_credentials
from appliance.procs import stop_process

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; the Jetson runs Python 3.10

log = logging.getLogger(__name__)

GST_LAUNCH = "gst-launch-1.0"
# Phrases gst-launch prints when the pipeline can never produce what we asked for.
_STDERR_LINES = 20  # of gst-launch's last words, logged when it ends: its error, its debug info, the element
_CONFIG_FAILURES = ("not-negotiated", "could not link", "no element", "erroneous pipeline", "no property")


def build_argv(pipeline: str, width: int, height: int, pixel_format: str, resize: bool,
               binary: str = GST_LAUNCH) -> list[str]:
    tail = ["!", "videoconvert"]
    if resize:
        tail += ["!", "videoscale"]
    tail += ["!", f"video/x-raw,format={pixel_format.upper()},width={width},height={height}",
             "!", "fdsink", "fd=1", "sync=false"]
    return [binary, "-q", *shlex.split(pipeline), *tail]


class GStreamerPipe(FrameSource):
    def __init__(self, pipeline: str, **kw: Unpack[FrameShape]) -> None:
        super().__init__(**kw)
        self.pipeline = pipeline
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdout: io.FileIO | None = None
        self._stderr: IO[bytes] | None = None

    def describe(self) -> str:
        return f"GStreamer pipeline {redact_credentials(self.pipeline)!r}"

    def open(self) -> None:
        binary = shutil.which(GST_LAUNCH)
        if binary is None:
            raise SourceConfigError(f"{GST_LAUNCH} not found on PATH; install gstreamer1.0-tools for gstreamer sources")
        argv = build_argv(self.pipeline, self.width, self.height, self.pixel_format, self.resize, binary)
        self._stderr = tempfile.TemporaryFile()  # a file, not a pipe: a chatty pipeline cannot block on it
        self._proc = proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr, bufsize=0
        )
        # bufsize=0 makes stdout the raw pipe, a FileIO (typeshed knows only IO[bytes] | None, without readinto).
        self._stdout = cast(io.FileIO, proc.stdout)
        log.debug("started %s (pid %d)", redact_credentials(" ".join(argv)), proc.pid)

    def read_into(self, out: np.ndarray) -> None:
        pipe = self._stdout
        if pipe is None:
            raise RuntimeError(f"{self.describe()} was read before open() or after close()")
        view = out.data.cast("B")
        got, need = 0, len(view)
        while got < need:
            n = pipe.readinto(view[got:])
            if not n:
                self._fail(got)
            got += n

    def _fail(self, partial: int) -> NoReturn:
        proc, stderr = self._proc, self._stderr
        if proc is None or stderr is None:
            raise RuntimeError(f"{self.describe()} was read before open() or after close()")
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        stderr.seek(0)
        text = redact_credentials(stderr.read().decode("utf-8", "replace").strip())  # a pipeline may hold a URL
        if text:
            log.info("%s printed:\n%s", GST_LAUNCH, "\n".join(text.splitlines()[-_STDERR_LINES:]))
        detail = text.splitlines()[-1] if text else f"exit code {code}"
        if any(phrase in text.lower() for phrase in _CONFIG_FAILURES):
            raise SourceConfigError(
                f"{self.describe()} cannot deliver {self.width}x{self.height} {self.pixel_format.upper()} "
                f"(set width/height to what it produces, or resize: true): {detail}"
            )
        if partial:
            raise EndOfStream(f"{self.describe()} stopped mid-frame ({partial} bytes): {detail}")
        raise EndOfStream(f"{self.describe()} ended: {detail}")

    def abort(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        stdout, self._stdout = self._stdout, None
        if proc is not None:
            stop_process(proc, timeout_s=3)
        if stdout is not None:
            stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
