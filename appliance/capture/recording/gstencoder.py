"""A GStreamer H.264 encoder for the frame encoder: ``nvv4l2h264enc`` (NVENC) on a Jetson, or a CPU element.

Frames go to a ``gst-launch-1.0`` child on its stdin (``fdsrc ! rawvideoparse``) and come back on its stdout
as an H.264 byte stream, one access unit per frame, split by FFmpeg's H.264 parser and paired with the frames'
wall times in order (the encoders run without B-frames, so one frame in is one access unit out, in order).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from fractions import Fraction
from typing import Any

import numpy as np

from appliance.capture.recording.h264stream import KEYFRAME_EVERY_S, TIME_BASE, stream_template
from appliance.procs import stop_process

log = logging.getLogger(__name__)

GST_LAUNCH = "gst-launch-1.0"


def encoder_chain(element: str, keyframe_every: int) -> list[str]:
    """The elements from raw video to H.264 for ``element``, keyframes every ``keyframe_every`` frames."""
    n = str(keyframe_every)
    if element == "nvv4l2h264enc":  # NVMM buffers through the VIC, then NVENC
        return ["videoconvert", "!", "video/x-raw,format=I420", "!", "nvvidconv", "!",
                "video/x-raw(memory:NVMM),format=NV12", "!", element, "insert-sps-pps=true", f"idrinterval={n}",
                f"iframeinterval={n}", "maxperf-enable=true"]
    if element == "x264enc":
        return ["videoconvert", "!", element, "tune=zerolatency", "speed-preset=ultrafast", f"key-int-max={n}"]
    return ["videoconvert", "!", element]


def build_argv(element: str, width: int, height: int, pixel_format: str, fps: float) -> list[str]:
    rate = Fraction(fps).limit_denominator(1001)
    keyframe_every = max(1, round(fps * KEYFRAME_EVERY_S))
    return [GST_LAUNCH, "-q", "fdsrc", "fd=0", "!",
            "rawvideoparse", f"width={width}", f"height={height}", f"format={pixel_format}",
            f"framerate={rate.numerator}/{rate.denominator}", "!",
            *encoder_chain(element, keyframe_every), "!", "h264parse", "config-interval=-1", "!",
            "video/x-h264,stream-format=byte-stream,alignment=au", "!", "fdsink", "fd=1", "sync=false"]


def has_idr(access_unit: bytes) -> bool:
    """True when the Annex B access unit holds an IDR slice (NAL type 5)."""
    at = access_unit.find(b"\x00\x00\x01")
    while at >= 0:
        if at + 3 < len(access_unit) and access_unit[at + 3] & 0x1F == 5:
            return True
        at = access_unit.find(b"\x00\x00\x01", at + 3)
    return False


class GstH264:
    """One gst-launch child encoding ``width`` x ``height`` frames at about ``fps``."""

    def __init__(self, element: str, width: int, height: int, pixel_format: str, fps: float) -> None:
        import av

        if shutil.which(GST_LAUNCH) is None:
            raise RuntimeError(f"{GST_LAUNCH} not found on PATH")
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(build_argv(element, width, height, pixel_format, fps), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, bufsize=0)
        self._parser = av.CodecContext.create("h264", "r")
        self._walls: deque[float] = deque()
        self._ready: list[tuple[Any, float]] = []
        self._lock = threading.Lock()
        self._tpl: tuple[Any, Any] | None = None
        self._t0: float | None = None
        self._last = -1
        self._reader = threading.Thread(target=self._read, name="gst-encoder-out", daemon=True)
        self._reader.start()

    def encode(self, frame: np.ndarray, wall: float, key: bool) -> list[tuple[Any, float]]:
        proc = self._proc
        if proc.poll() is not None or proc.stdin is None:
            raise RuntimeError(f"{GST_LAUNCH} exited ({proc.returncode}): {self._last_words()}")
        with self._lock:
            self._walls.append(wall)
        proc.stdin.write(np.ascontiguousarray(frame).data)  # a broken pipe raises: the thread retries later
        with self._lock:
            ready, self._ready = self._ready, []
        return ready

    def _read(self) -> None:
        out = self._proc.stdout
        assert out is not None
        while chunk := out.read(1 << 16):
            for packet in self._parser.parse(chunk):
                self._stamp(packet)

    def _stamp(self, packet: Any) -> None:
        data = bytes(packet)
        with self._lock:
            wall = self._walls.popleft() if self._walls else None
        if wall is None:
            return
        if self._tpl is None:
            if not has_idr(data):
                return  # a segment starts at a keyframe anyway
            self._tpl = stream_template(data)
        if self._t0 is None:
            self._t0 = wall
        pts = max(round((wall - self._t0) / TIME_BASE), self._last + 1)
        self._last = pts
        packet.stream = self._tpl[1]
        packet.time_base = TIME_BASE
        packet.pts = packet.dts = pts
        packet.is_keyframe = has_idr(data)
        with self._lock:
            self._ready.append((packet, wall))

    def _last_words(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else "no message"

    def close(self) -> None:
        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        stop_process(self._proc, timeout_s=3)
        self._reader.join(3)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()
        if self._tpl is not None:
            self._tpl[0].close()
