"""Cameras under supervision: capture processes as restartable children, their rings and the doorbell they ring
(``Capture``, the capture start step's part), and their status for MQTT."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from appliance.backoff import RestartPolicy
from appliance.capture import (
    CameraConfig,
    CaptureHealth,
    CaptureProcess,
    CaptureStartError,
    CaptureState,
    RingDirectory,
    RingError,
    RingReader,
)
from appliance.capture.doorbell import Doorbell
from appliance.capture.ringdir import RESTREAM_SOCKET
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.messages import CameraState, CameraStatus
from appliance.supervisor.children import ChildSupervisor

if TYPE_CHECKING:  # annotations only: the publisher module loads paho
    from appliance.mqtt.publisher import MqttPublisher
    from appliance.pipeline.scheduler import Scheduler

log = logging.getLogger(__name__)

_MQTT_STATE: dict[CaptureState, CameraState] = {
    CaptureState.IDLE: "starting",
    CaptureState.CONNECTING: "starting",
    CaptureState.BACKOFF: "stalled",
    CaptureState.STREAMING: "streaming",
    CaptureState.STALLED: "stalled",
    CaptureState.FAILED: "error",
    CaptureState.STOPPED: "stopped",
    CaptureState.WAITING: "waiting",
}


@dataclass
class SupervisedCamera:
    """One configured camera as the appliance holds it: its capture process, the scheduler's reader on its
    ring, and what was last read and published."""

    id: str
    capture: CaptureProcess
    reader: RingReader | None = None  # opened once the ring exists
    published_state: CameraState | None = None
    health: CaptureHealth | None = None  # the latest reading of the ring header
    waiting_since: float | None = None  # epoch seconds it started waiting for its source; None unless waiting
    last_error: tuple[str, float] | None = None  # the ring's last error and when it was first read (epoch s)

    def refresh(self, metrics: ApplianceMetrics, publisher: MqttPublisher | None) -> None:
        """Read the ring header (once a tick): export its counters, publish the camera's state when it changed."""
        try:
            health = self.capture.health()
        except Exception as exc:  # ring not there yet (camera never started)
            log.debug("camera %s: no health yet: %s", self.id, exc)
            return
        self.health = health
        state = mqtt_camera_state(health)
        # Fixed once: wall time less the state's age moves a little with every reading.
        self.waiting_since = (self.waiting_since or time.time() - health.state_age_s) if state == "waiting" else None
        metrics.record_camera(self.id, health, streaming=state == "streaming", waiting=state == "waiting")
        if health.last_error and (self.last_error is None or self.last_error[0] != health.last_error):
            self.last_error = (health.last_error, time.time())
        if state != self.published_state and publisher is not None:
            publisher.publish_camera_status(self.status(state, health))
            detail = f" ({health.last_error})" if health.last_error and state != "streaming" else ""
            log.info("camera %s: %s%s", self.id, state, detail, extra={"camera": self.id, "stage": "capture"})
            self.published_state = state

    def status(self, state: CameraState, health: CaptureHealth) -> CameraStatus:
        """Its MQTT status: ``detail`` says why it is not streaming (none while it streams: the last error, kept
        with its time in ``last_error``, is history, not now)."""
        detail = health.last_error if state != "streaming" and health.last_error else None
        return CameraStatus(self.id, state, round(health.fps, 2), detail, self.waiting_since, self.last_error)

    def close(self) -> None:
        """The scheduler's reader, then the capture's ring (its process was stopped first). A lease that a request
        Triton never finished still holds (a server abandoned at stop) keeps the reader mapped until the process
        exits: unmapping memory Triton may still read is worse than a mapping the exit frees."""
        if self.reader is not None:
            try:
                self.reader.close()
            except RingError as exc:
                log.warning("camera %s: %s; left mapped until the appliance exits", self.id, exc,
                            extra={"camera": self.id, "stage": "capture"})
        self.capture.close()


def mqtt_camera_state(health: CaptureHealth) -> CameraState:
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


@dataclass(frozen=True)
class Capture:
    """The cameras' capture side: a capture process per camera (the appliance's child supervisor starts and
    restarts them), their rings in this run's private folder, and the doorbell they ring when a frame is written
    (it wakes the scheduler)."""

    doorbell: Doorbell
    rings: RingDirectory
    cameras: dict[str, SupervisedCamera]  # changed only by add and remove (a reload)
    record_root: Path | None = None  # a recording camera's segments go to record_root/<camera>
    restream_socket: Path | None = None  # the RTSP server's packet socket, when restream.enabled

    def add(self, camera: CameraConfig, children: ChildSupervisor) -> SupervisedCamera:
        """The camera's capture process, registered with ``children`` under ``camera:<id>`` (not started)."""
        record_dir = self.record_root / camera.id if self.record_root is not None and camera.record.enabled else ""
        process = CaptureProcess(camera, shm_root=self.rings.path, doorbell=self.doorbell.address,
                                 record_dir=record_dir, restream_socket=self.restream_socket or "")
        self.cameras[camera.id] = cam = SupervisedCamera(camera.id, process)
        children.register(f"camera:{camera.id}", functools.partial(CaptureChild, process), RestartPolicy(
            initial_backoff_s=camera.backoff.initial_s, max_backoff_s=camera.backoff.max_s))
        return cam

    def remove(self, camera_id: str, children: ChildSupervisor) -> None:
        """Stop the camera's capture process, then close its reader and ring (the scheduler let go of it first)."""
        children.remove(f"camera:{camera_id}", lambda child: cast(CaptureChild, child).process.stop())
        self.cameras.pop(camera_id).close()

    def open_readers(self, configs: Sequence[CameraConfig], scheduler: Scheduler,
                     on_error: Callable[[str], None]) -> None:
        """The scheduler's reader on each camera's ring; a ring that could not even be created (e.g. /dev/shm
        full) is said and skipped: that camera is not inferred, the others are."""
        for camera in configs:
            cam = self.cameras[camera.id]
            try:
                cam.reader = RingReader(cam.capture.ring_path)
            except RingError as exc:
                on_error(f"camera {camera.id}: {exc}")
                log.error("camera %s will not be inferred: %s", camera.id, exc)
                continue
            scheduler.add_camera(camera.id, cam.reader, camera.fps)

    def close(self) -> None:
        """Each camera's reader and ring (their processes were stopped first), the ring folder, the doorbell."""
        for cam in self.cameras.values():
            cam.close()
        self.rings.close()
        self.doorbell.close()


def set_up_capture(configs: Sequence[CameraConfig], shm_root: Path, children: ChildSupervisor,
                   step: Callable[[str], None], record_root: Path | None = None,
                   restream: bool = False) -> Capture:
    """A capture process per camera, registered with ``children`` (not started: ``children.start_all()``), its
    ring in a fresh private folder under ``shm_root`` (docs/capture.md); ``step`` says which camera is next. A
    camera that records keeps its segments in ``record_root/<camera>``; with ``restream``, a compressed camera sends
    its packets to the RTSP server's socket in the ring folder (a passthrough ``/<camera>``)."""
    doorbell = Doorbell()
    try:
        rings = RingDirectory.create(shm_root)
    except BaseException:
        doorbell.close()  # what this step made, before the appliance stops what the steps before it did
        raise
    capture = Capture(doorbell, rings, {}, record_root, rings.path / RESTREAM_SOCKET if restream else None)
    for camera in configs:
        step(f"camera {camera.id}")
        capture.add(camera, children)
    return capture
