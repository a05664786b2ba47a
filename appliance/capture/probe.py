"""A camera configured without ``width``/``height`` takes its source's own size, read once at start.

The source is opened as the capture process would open it (same timeouts, same V4L2 format), asked for its size
(a file's or a stream's header, the mode a V4L2 driver negotiates, the first image of a folder) and closed; the
ring is then made for that size. A source that cannot tell now (a camera offline at start) fails the start,
with a message that says to set the size."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from appliance.capture.config import CameraConfig

log = logging.getLogger(__name__)


class SizeUnknown(RuntimeError):
    """The source of a camera without a configured size could not tell its size."""


def probe_size(camera: CameraConfig) -> tuple[int, int]:
    """(width, height) the camera's source delivers; SizeUnknown when it cannot be opened or does not say."""
    from appliance.capture.sources import SourceError, make_source

    # 0x0 with resize: ask for no size, so a V4L2 driver keeps the mode it negotiates.
    source = make_source(camera.model_copy(update={"width": 0, "height": 0, "resize": True}))
    try:
        source.open()
        size = source.native_size()
    except SourceError as exc:
        raise SizeUnknown(f"camera {camera.id!r}: no width/height configured and its source cannot tell its size "
                          f"now ({exc}); set width and height in its config") from None
    finally:
        source.close()
    if size is None:
        raise SizeUnknown(f"camera {camera.id!r}: {source.describe()} does not say its frame size; set width and "
                          "height in its config")
    return size


def resolve_sizes(cameras: Sequence[CameraConfig],
                  probe: Callable[[CameraConfig], tuple[int, int]] = probe_size) -> list[CameraConfig]:
    """The cameras, each without a configured size given its source's (logged); the others as they are."""
    resolved = []
    for camera in cameras:
        if camera.width is not None:
            resolved.append(camera)
            continue
        width, height = probe(camera)
        log.info("camera %r: %dx%d, the size its source delivers (no width/height configured)", camera.id,
                 width, height)
        resolved.append(camera.model_copy(update={"width": width, "height": height}))
    return resolved
