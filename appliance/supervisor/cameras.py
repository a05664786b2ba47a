"""Cameras under supervision: capture processes as restartable children, and their status for MQTT."""

from __future__ import annotations

import logging

from appliance.capture import CaptureHealth, CaptureProcess, CaptureStartError, CaptureState, RingError

log = logging.getLogger(__name__)

_MQTT_STATE = {
    CaptureState.IDLE: "starting",
    CaptureState.CONNECTING: "starting",
    CaptureState.BACKOFF: "stalled",
    CaptureState.STREAMING: "streaming",
    CaptureState.STALLED: "stalled",
    CaptureState.FAILED: "error",
    CaptureState.STOPPED: "stopped",
}


def mqtt_camera_state(health: CaptureHealth) -> str:
    """The camera state published on MQTT; a dead writer is an error whatever the ring last said."""
    if not health.writer_alive and health.state is not CaptureState.STOPPED:
        return "error"
    return _MQTT_STATE[health.state]


class CaptureChild:
    """Adapts a CaptureProcess to the supervisor's restart records: a failed start counts as a dead child,
    so a camera that is unplugged at boot is retried with backoff instead of failing the whole service."""

    def __init__(self, process: CaptureProcess, start_timeout_s: float = 30.0) -> None:
        self.process = process
        self._start_timeout_s = start_timeout_s
        self._failed_exitcode: int | None = None

    def start(self) -> None:
        self._failed_exitcode = None
        try:
            self.process.start(self._start_timeout_s)
        except (CaptureStartError, RingError) as exc:
            log.error("camera %r: %s", self.process.camera.id, exc)
            self._failed_exitcode = getattr(exc, "exitcode", None) or 1

    def is_alive(self) -> bool:
        return self._failed_exitcode is None and self.process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self._failed_exitcode if self._failed_exitcode is not None else self.process.exitcode
