"""Compressed sources (RTSP streams, video files) through PyAV: one connection, demuxed once; each packet is
decoded for the ring and handed on as it is to the packet sinks (capture/packets.py: the segment recorder, the
restream's passthrough; no second connection to the camera, no re-encode).

Used for cameras with ``record.enabled`` or a passthrough restream; the others keep OpenCV's FFmpeg backend
(capture/sources/opencv.py).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from appliance.capture.packets import PacketFanout
from appliance.capture.sources.base import (
    DecodeError,
    EndOfStream,
    FrameShape,
    FrameSource,
    SourceAbsent,
    SourceError,
    fit_frame,
)
from appliance.config.redact import redact_credentials

if TYPE_CHECKING:
    from typing_extensions import Unpack

log = logging.getLogger(__name__)

MAX_WAITING = 256  # packets waiting for their frame (a decoder holds a few with frame threading or B-frames)


class AvCapture(FrameSource):
    """A file or stream demuxed and decoded by PyAV; its packets go to ``packets`` (when given) too."""

    def __init__(self, target: str, *, packets: PacketFanout | None, is_file: bool, loop: bool = False,
                 realtime: bool = True, transport: str = "tcp", open_timeout_s: float = 10.0,
                 read_timeout_s: float = 10.0, decode_threads: int = 1, **kw: Unpack[FrameShape]) -> None:
        super().__init__(**kw)
        self.target, self.packets, self.is_file, self.loop = target, packets, is_file, loop
        self.decode_threads = decode_threads  # CameraConfig's source.decode_threads (capture/config.py)
        self.paced = is_file and realtime
        self.transport, self.open_timeout_s, self.read_timeout_s = transport, open_timeout_s, read_timeout_s
        self._container: Any = None
        self._frames: Iterator[Any] | None = None
        self._fps: float | None = None
        # Demuxed packets waiting for their frame to reach the ring: each is recorded with the time its frame
        # was shown, the time the events of that frame carry, so a clip and its event agree frame for frame.
        self._waiting: deque[Any] = deque()
        self._count = 0

    def describe(self) -> str:
        return f"file {self.target}" if self.is_file else f"stream {redact_credentials(self.target)}"

    @property
    def native_fps(self) -> float | None:
        return self._fps

    def open(self) -> None:
        import av

        if self.is_file and not Path(self.target).is_file():
            raise SourceAbsent(f"{self.describe()} does not exist or is not a file")
        options = {} if self.is_file else {"rtsp_transport": self.transport}
        try:
            self._container = av.open(self.target, options=options, timeout=(self.open_timeout_s, self.read_timeout_s))
        except (av.FFmpegError, OSError) as exc:
            raise SourceError(f"could not open {self.describe()}: {exc}") from exc
        if not self._container.streams.video:
            self._release()
            raise SourceError(f"{self.describe()} has no video stream")
        stream = self._container.streams.video[0]
        stream.codec_context.thread_count = self.decode_threads  # 0: FFmpeg's one per core
        if self.decode_threads != 1:
            stream.codec_context.thread_type = "AUTO"
        rate = stream.average_rate or stream.guessed_rate
        self._fps = float(rate) if rate and 0 < float(rate) < 1000 else None
        self._frames = self._decode(stream)
        self._count = 0

    def native_size(self) -> tuple[int, int] | None:
        stream = self._container.streams.video[0] if self._container is not None else None
        return (stream.codec_context.width, stream.codec_context.height) if stream is not None else None

    def _decode(self, stream: Any) -> Iterator[Any]:
        import av

        while True:
            for packet in self._container.demux(stream):
                try:
                    frames = packet.decode()
                except av.FFmpegError as exc:
                    raise DecodeError(f"{self.describe()}: {exc}") from exc
                if self.packets is not None and packet.dts is not None:
                    self._wait_for_frame(packet)
                yield from frames
            if not (self.is_file and self.loop):
                return
            if self._count == 0:
                raise SourceError(f"{self.describe()} yielded no frames: corrupt or not a video")
            self._container.seek(0, stream=stream)
            self._shown(None, time.time())  # what the file's end left undecoded

    def _wait_for_frame(self, packet: Any) -> None:
        assert self.packets is not None
        self._waiting.append(packet)
        if len(self._waiting) > MAX_WAITING:  # a stream whose packets never become frames: record them anyway
            self.packets.offer(self._waiting.popleft(), time.time())

    def _shown(self, pts: int | None, wall: float) -> None:
        """The frame ``pts`` reached the ring at ``wall``: its packet, and any before it, go to the sinks
        (None: all of them)."""
        if self.packets is None:
            return
        while self._waiting:
            packet = self._waiting[0]
            if pts is not None and packet.pts is not None and packet.pts > pts:
                return  # a later frame's (decode order differs from display order with B-frames)
            self._waiting.popleft()
            late = float((pts - packet.pts) * packet.time_base) if pts is not None and packet.pts is not None else 0
            self.packets.offer(packet, wall - late)

    def read_into(self, out: np.ndarray) -> None:
        import av

        if self._frames is None:
            raise RuntimeError(f"{self.describe()} was read before open() or after close()")
        try:
            frame = next(self._frames)
        except StopIteration:
            raise EndOfStream(f"{self.describe()} ended") from None
        except av.FFmpegError as exc:
            raise SourceError(f"{self.describe()}: {exc}") from exc
        fit_frame(frame.to_ndarray(format="bgr24"), out, self.pixel_format, self.resize, self.describe())
        self._count += 1
        self._shown(frame.pts, time.time())

    def _release(self) -> None:
        self._waiting.clear()  # their frames were never shown
        container, self._container, self._frames = self._container, None, None
        if container is None:
            return
        if self.packets is not None:
            self.packets.release(container)  # closed by the recorder once its packets are written
        else:
            container.close()

    def close(self) -> None:
        self._release()
