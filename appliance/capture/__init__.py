"""Camera capture into per-camera shared-memory rings (see docs/capture.md).

Supervisor side: :class:`RingDirectory` (the run's private ring folder), :class:`CaptureProcess` (one per camera)
and :func:`reclaim_stale_rings`.
Inference side: :class:`RingReader` -> :class:`FrameLease` (zero-copy view, release when done).
"""

from appliance.capture.config import CameraConfig
from appliance.capture.errors import (
    RingBusyError,
    RingError,
    RingForeignError,
    RingFormatError,
    RingNotFoundError,
    ShmSpaceError,
)
from appliance.capture.health import CaptureHealth
from appliance.capture.layout import CaptureState, RingGeometry
from appliance.capture.process import (
    EXIT_CONFIG,
    EXIT_HUNG,
    EXIT_OK,
    EXIT_RING_BUSY,
    CaptureProcess,
    CaptureStartError,
)
from appliance.capture.ring import FrameLease, FrameMeta, RingReader
from appliance.capture.ringdir import RingDirectory
from appliance.capture.ringfile import reclaim_stale_rings, ring_path

__all__ = [
    "EXIT_CONFIG",
    "EXIT_HUNG",
    "EXIT_OK",
    "EXIT_RING_BUSY",
    "CameraConfig",
    "CaptureHealth",
    "CaptureProcess",
    "CaptureStartError",
    "CaptureState",
    "FrameLease",
    "FrameMeta",
    "RingBusyError",
    "RingDirectory",
    "RingError",
    "RingForeignError",
    "RingFormatError",
    "RingGeometry",
    "RingNotFoundError",
    "RingReader",
    "ShmSpaceError",
    "reclaim_stale_rings",
    "ring_path",
]
