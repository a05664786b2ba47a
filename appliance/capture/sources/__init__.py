"""Frame sources, one class per ``source.type``; :func:`make_source` is the explicit registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.capture.config import CameraConfig
from appliance.capture.sources.base import (
    DecodeError,
    EndOfStream,
    FrameShape,
    FrameSource,
    SourceAbsent,
    SourceConfigError,
    SourceError,
)

if TYPE_CHECKING:
    from appliance.capture.packets import PacketFanout

__all__ = ["DecodeError", "EndOfStream", "FrameSource", "SourceAbsent", "SourceConfigError", "SourceError",
           "make_source"]


def make_source(camera: CameraConfig, packets: PacketFanout | None = None) -> FrameSource:
    """Build (not open) the source for ``camera``; modules load here so OpenCV loads only where needed.

    A camera whose packets are wanted (``packets`` given: recording, passthrough restream) is read through PyAV,
    which hands its packets to them."""
    src = camera.source
    width, height = camera.frame_size
    common = FrameShape(width=width, height=height, pixel_format=camera.pixel_format, resize=camera.resize)
    if packets is not None and src.type in ("file", "rtsp"):
        from appliance.capture.sources.pyav import AvCapture

        if src.type == "file":
            return AvCapture(str(src.path), packets=packets, is_file=True, loop=src.loop, realtime=src.realtime,
                             decode_threads=src.decode_threads, **common)
        return AvCapture(src.url, packets=packets, is_file=False, transport=src.transport,
                         open_timeout_s=src.open_timeout_s, read_timeout_s=camera.stall_timeout_s + 2.0,
                         decode_threads=src.decode_threads, **common)
    if src.type == "file":
        from appliance.capture.sources.opencv import FileCapture

        return FileCapture(src.path, src.loop, src.realtime, decode_threads=src.decode_threads, **common)
    if src.type == "rtsp":
        from appliance.capture.sources.opencv import RtspCapture

        # Reads time out a little after the stall watchdog fires, so a silent stream is reported as a stall.
        return RtspCapture(src.url, src.transport, src.open_timeout_s, camera.stall_timeout_s + 2.0,
                           decode_threads=src.decode_threads, **common)
    if src.type == "v4l2":
        from appliance.capture.sources.opencv import V4l2Capture

        return V4l2Capture(src.device, src.fourcc, camera.fps, **common)
    if src.type == "images":
        from appliance.capture.sources.images import ImageFolder

        return ImageFolder(src.path, src.loop, src.realtime, **common)
    if src.type == "gstreamer":
        from appliance.capture.sources.gstreamer import GStreamerPipe

        return GStreamerPipe(src.pipeline, **common)
    raise ValueError(f"no source registered for type {src.type!r}")  # unreachable while the union is exhaustive
