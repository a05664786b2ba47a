"""A camera configured without ``width``/``height`` takes its source's own size, read once at start.

The source is opened as the capture process would open it (same timeouts, same V4L2 format), asked for its size
(a file's or a stream's header, the mode a V4L2 driver negotiates, the first image of a folder) and closed; the
ring is then made for that size. A source that cannot tell now (a camera offline at start) leaves that camera
waiting for its size (``split_by_size``; ``appliance.supervisor.latecameras`` asks again) while the others start."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from appliance.capture.config import CameraConfig
from appliance.errors import ApplianceError

log = logging.getLogger(__name__)


class SizeUnknown(ApplianceError, RuntimeError):
    """The source of a camera without a configured size could not tell its size; ``reason``: what the source
    said (the message adds what to do)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


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
                          f"now ({exc}); set width and height in its config", str(exc)) from None
    finally:
        source.close()
    if size is None:
        raise SizeUnknown(f"camera {camera.id!r}: {source.describe()} does not say its frame size; set width and "
                          "height in its config", f"{source.describe()} does not say its frame size")
    return size


def sized(camera: CameraConfig, probe: Callable[[CameraConfig], tuple[int, int]] = probe_size) -> CameraConfig:
    """The camera as it is when it has a size, else with its source's (logged); SizeUnknown when it cannot tell."""
    if camera.width is not None:
        return camera
    width, height = probe(camera)
    log.info("camera %r: %dx%d, the size its source delivers (no width/height configured)", camera.id, width, height)
    return camera.model_copy(update={"width": width, "height": height})


def split_by_size(cameras: Sequence[CameraConfig], probe: Callable[[CameraConfig], tuple[int, int]] = probe_size
                  ) -> tuple[list[CameraConfig], list[tuple[CameraConfig, SizeUnknown]]]:
    """The cameras that have a size (configured, or their source's now), and those whose source could not tell
    it now, each with why (logged as a warning: the camera waits, the others start)."""
    ready, waiting = [], []
    for camera in cameras:
        try:
            ready.append(sized(camera, probe))
        except SizeUnknown as exc:
            log.warning("camera %r waits: no width/height configured and its source cannot tell its size now (%s); "
                        "it starts when its source answers", camera.id, exc.reason)
            waiting.append((camera, exc))
    return ready, waiting


def resolve_sizes(cameras: Sequence[CameraConfig],
                  probe: Callable[[CameraConfig], tuple[int, int]] = probe_size) -> list[CameraConfig]:
    """The cameras, each without a configured size given its source's (logged); the others as they are;
    SizeUnknown for the first that cannot tell."""
    return [sized(camera, probe) for camera in cameras]
