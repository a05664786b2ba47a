"""What every frame source provides to the capture loop, and how it reports trouble."""

from __future__ import annotations

import abc
from typing import TypedDict

import numpy as np

from appliance.errors import ApplianceError


class SourceError(ApplianceError):
    """The source failed in a way that reconnecting may fix (unplugged, network down, server restarted)."""


class SourceAbsent(SourceError):
    """The source is not there yet (no device node, no file, nothing answering at the URL): the camera waits
    for it, retrying with its backoff, instead of counting it as a failure."""


class SourceConfigError(SourceError):
    """The source works but can never deliver what the config asks (size, format): do not retry."""


class EndOfStream(SourceError):
    """The source ended (file end without loop, stream closed by the server, pipeline finished)."""


class DecodeError(SourceError):
    """One read failed to decode; the capture counts it and carries on until too many come in a row."""


class FrameShape(TypedDict):
    """The arguments of :class:`FrameSource` itself, which every source passes on as ``**kw``."""

    width: int
    height: int
    pixel_format: str
    resize: bool


class FrameSource(abc.ABC):
    """A camera, stream, file or pipeline delivering H x W x 3 uint8 frames.

    Lifecycle: ``open()`` once, ``read_into()`` repeatedly, ``close()`` once. ``abort()`` may be called
    from another thread to break a blocked read (stall watchdog); it must not raise.
    """

    #: True for sources that would deliver as fast as they can decode (files, images): the loop paces them.
    paced: bool = False
    #: How long open() may legitimately block; the stall watchdog adds it while connecting.
    open_timeout_s: float = 0.0

    def __init__(self, width: int, height: int, pixel_format: str, resize: bool) -> None:
        self.width, self.height, self.pixel_format, self.resize = width, height, pixel_format, resize

    @abc.abstractmethod
    def open(self) -> None:
        """Connect; raise SourceAbsent (not there yet), SourceError (retry later) or SourceConfigError (never
        going to work)."""

    @abc.abstractmethod
    def read_into(self, out: np.ndarray) -> None:
        """Write the next frame into ``out`` (height x width x 3, the ring's pixel order), blocking until one comes.

        Raises EndOfStream, DecodeError or SourceError.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device/connection/child process. Idempotent."""

    def abort(self) -> None:  # noqa: B027 - a source that cannot break a blocked read keeps this no-op
        """Break a read blocked in another thread, where the source can (default: it cannot)."""

    @property
    def native_fps(self) -> float | None:
        """The rate the source itself declares (a file's frame rate), if any."""
        return None

    def native_size(self) -> tuple[int, int] | None:
        """(width, height) the open source delivers, or None when it cannot tell before a frame."""
        return None

    def describe(self) -> str:
        return type(self).__name__


def fit_frame(frame: np.ndarray, out: np.ndarray, pixel_format: str, resize: bool, origin: str) -> None:
    """Copy a BGR ``frame`` into ``out``, converting to the ring's order and size; raise on a size mismatch."""
    import cv2

    if frame.ndim == 2:
        frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
    elif frame.ndim != 3 or frame.shape[2] not in (3, 4):
        raise SourceConfigError(f"{origin} delivers frames of shape {frame.shape}, not colour images")
    elif frame.shape[2] == 4:
        frame = cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR)
    height, width = out.shape[:2]
    if frame.shape[:2] != (height, width):
        if not resize:
            raise SourceConfigError(
                f"{origin} delivers {frame.shape[1]}x{frame.shape[0]} frames but the camera is configured for "
                f"{width}x{height}; set width/height to match, or resize: true"
            )
        frame = cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)
    if pixel_format == "rgb":
        cv2.cvtColor(frame, cv2.COLOR_BGR2RGB, dst=out)
    else:
        np.copyto(out, frame)
