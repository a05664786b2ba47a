"""One capture process per camera, for the supervisor to start, watch and restart.

The parent side, :class:`CaptureProcess`, owns the camera's ring (created, space-checked and reclaimed
on the first :meth:`~CaptureProcess.start`) and spawns the child, :func:`capture_main`, which becomes the
ring's writer. The ring outlives the child: when the child dies (crash, SIGKILL, hang exit), readers keep
their mapping, and the next ``start()`` spawns a new writer on the same ring that empties any slot the
dead one left half-written and continues the frame sequence.

Restart policy (backoff, budget) is the supervisor's; exit codes tell it what happened:
``EXIT_OK`` stopped on request, ``EXIT_CONFIG`` the camera can never deliver what the config asks,
``EXIT_HUNG`` a source call hung past the stall watchdog, ``EXIT_RING_BUSY`` another writer is alive, negative
values are signals. The supervisor restarts every exit alike (backoff, then crash loop); see docs/capture.md.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.capture.config import RECORDED_SOURCES, CameraConfig
from appliance.capture.errors import RingBusyError
from appliance.capture.health import CaptureHealth
from appliance.capture.layout import CaptureState, RingGeometry
from appliance.capture.ring import RingReader
from appliance.capture.ringfile import RingOwner, create_ring, ring_path
from appliance.capture.stderrfilter import StderrRedactor
from appliance.errors import ApplianceError
from appliance.logs import JOURNAL_SOCKET
from appliance.logs import configure as configure_logging
from appliance.procs import stop_process

if TYPE_CHECKING:
    from appliance.capture.packets import PacketFanout, RestreamFeed
    from appliance.capture.recording.encoder import FrameEncoder
    from appliance.capture.recording.recorder import SegmentRecorder

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_RING_BUSY = 73  # EX_CANTCREAT
EXIT_HUNG = 75  # EX_TEMPFAIL
EXIT_CONFIG = 78  # EX_CONFIG


class CaptureStartError(ApplianceError, RuntimeError):
    """The capture process died or did not attach to its ring in time; carries its exit code and last error."""

    def __init__(self, message: str, exitcode: int | None = None, last_error: str = "") -> None:
        super().__init__(message)
        self.exitcode, self.last_error = exitcode, last_error


@dataclass(frozen=True)
class CaptureSpec:
    """Everything the child needs, small and picklable."""

    camera_json: str
    ring_path: str
    log_level: int = logging.INFO
    doorbell: str = ""  # rung after each published frame (appliance.capture.doorbell); "" rings nothing
    journal_socket: str = str(JOURNAL_SOCKET)  # used when JOURNAL_STREAM says stderr goes to the journal
    record_dir: str = ""  # where the camera's segments go when its record.enabled; "" records nothing
    restream_socket: str = ""  # the RTSP server's packet socket (a passthrough /<camera>); "" sends nothing


def ring_geometry(camera: CameraConfig) -> RingGeometry:
    return RingGeometry(*camera.frame_size, camera.ring_slots, camera.pixel_format)


def capture_main(spec: CaptureSpec) -> None:
    """Child process entry point: write frames of one camera into its ring until SIGTERM/SIGINT."""
    from appliance.capture.loop import CaptureLoop
    from appliance.capture.ring import RingWriter
    from appliance.capture.sources import make_source

    camera = CameraConfig.model_validate_json(spec.camera_json)
    # The supervisor's handler (journald under systemd): CAMERA= on every record, warnings at priority 4.
    configure_logging(spec.log_level, journal_path=Path(spec.journal_socket), camera=camera.id)
    redactor = StderrRedactor()  # what FFmpeg/OpenCV print natively goes through it too
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(), stop), name="parent-watch", daemon=True).start()
    try:
        writer = RingWriter(spec.ring_path)
    except RingBusyError as exc:
        log.error("%s", exc)
        sys.stdout.flush()
        redactor.close()
        os._exit(EXIT_RING_BUSY)

    def hung(message: str) -> None:
        logging.shutdown()
        redactor.close()
        os._exit(EXIT_HUNG)  # the blocked native call cannot be interrupted; the process is the unit of recovery

    on_frame = None
    if spec.doorbell:
        from appliance.capture.doorbell import DoorbellRinger

        on_frame = DoorbellRinger(spec.doorbell).ring
    recorder = _recorder(camera, spec.record_dir)
    encoder = _frame_encoder(camera, recorder) if recorder is not None else None
    feed = _restream_feed(camera, spec.restream_socket)
    packets = _packets(feed, None if encoder else recorder)
    loop = CaptureLoop(camera, writer, lambda: make_source(camera, packets), on_hung=hung,
                       on_frame=on_frame, on_published=encoder.offer if encoder is not None else None)
    final = loop.run(stop)
    if feed is not None:
        feed.stop()
    if encoder is not None:
        encoder.stop()
    if recorder is not None:
        recorder.stop()
    writer.close(final)
    logging.shutdown()
    redactor.close()
    sys.exit(EXIT_CONFIG if final == CaptureState.FAILED else EXIT_OK)


def _restream_feed(camera: CameraConfig, address: str) -> RestreamFeed | None:
    """The camera's own packets for the restream's passthrough /<camera> (compressed sources only)."""
    if not address or camera.source.type not in RECORDED_SOURCES:
        return None
    from appliance.capture.packets import RestreamFeed

    return RestreamFeed(address, camera.id).start()


def _packets(feed: RestreamFeed | None, recorder: SegmentRecorder | None) -> PacketFanout | None:
    """Where a compressed source's packets go (None: nowhere, the source may be read by OpenCV)."""
    from appliance.capture.packets import PacketFanout, PacketSink

    sinks: list[PacketSink] = [sink for sink in (feed, recorder) if sink is not None]  # copies first
    return PacketFanout(sinks, recorder) if sinks else None


def _recorder(camera: CameraConfig, record_dir: str) -> SegmentRecorder | None:
    if not (record_dir and camera.record.enabled):
        return None
    from appliance.capture.recording.recorder import SegmentRecorder

    recorder = SegmentRecorder(Path(record_dir), camera.record, camera.id)
    try:
        recorder.start()
    except OSError as exc:  # a recorder that cannot start must not stop the camera
        log.error("camera %r: not recording: cannot use %s: %s", camera.id, record_dir, exc)
        return None
    return recorder


def _frame_encoder(camera: CameraConfig, recorder: SegmentRecorder) -> FrameEncoder | None:
    """A raw camera records by encoding its frames (capture/recording/encoder.py); None for the compressed
    sources, whose own packets are kept."""
    if camera.source.type in RECORDED_SOURCES:
        return None
    from appliance.capture.h264encoders import named_encoder
    from appliance.capture.recording.encoder import make_frame_encoder

    try:
        choice = named_encoder(camera.record.encoder)
    except RuntimeError as exc:
        log.error("camera %r: not recording: %s", camera.id, exc)
        return None
    encoder = make_frame_encoder(recorder, choice, camera.pixel_format, camera.fps, camera.id)
    encoder.start()
    return encoder


def _stop_when_orphaned(parent: int, stop: threading.Event, interval_s: float = 0.5) -> None:
    """A capture process must not outlive its supervisor: it would hold the ring's writer role forever."""
    while not stop.wait(interval_s):
        if os.getppid() != parent:
            log.warning("supervisor (pid %d) is gone; stopping capture", parent)
            stop.set()


class CaptureProcess:
    """Parent-side handle of one camera's capture process and ring.

    ``start()`` may be called again after the child died; ``close()`` stops it and removes the ring.
    """

    def __init__(
        self,
        camera: CameraConfig,
        *,
        shm_root: Path | str = "/dev/shm",
        log_level: int = logging.INFO,
        doorbell: str = "",
        journal_socket: Path | str = JOURNAL_SOCKET,
        record_dir: Path | str = "",
        restream_socket: Path | str = "",
    ) -> None:
        self.camera = camera
        self._record_dir = str(record_dir)
        self._restream_socket = str(restream_socket)
        self._doorbell = doorbell
        self._journal_socket = str(journal_socket)
        self.ring_path = ring_path(shm_root, camera.id)
        self._log_level = log_level
        # Spawned, never forked: the child starts without the supervisor's threads, locks and Triton state.
        self._ctx = multiprocessing.get_context("spawn")
        self._owner: RingOwner | None = None
        self._monitor: RingReader | None = None
        self._proc: multiprocessing.process.BaseProcess | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Create (or reclaim) the ring on first use, spawn the capture child, wait until it writes the ring.

        Raises ShmSpaceError / RingBusyError from the ring, or CaptureStartError if the child dies or does
        not attach within ``timeout`` seconds.
        """
        if self.is_alive():
            raise CaptureStartError(f"capture of camera {self.camera.id!r} is already running (pid {self.pid})")
        if self._monitor is None:
            if self._owner is None:
                self._owner = create_ring(self.ring_path, ring_geometry(self.camera), self.camera.id)
            self._monitor = RingReader(self.ring_path)
        monitor = self._monitor
        before = monitor.health().generation
        spec = CaptureSpec(self.camera.model_dump_json(), str(self.ring_path), self._log_level, self._doorbell,
                           self._journal_socket, self._record_dir, self._restream_socket)
        proc = self._ctx.Process(target=capture_main, args=(spec,), name=f"capture-{self.camera.id}", daemon=False)
        proc.start()
        self._proc = proc  # only once started: stop() joins it, and joining a never-started process raises
        deadline = time.monotonic() + timeout
        while monitor.health().generation == before:
            if not proc.is_alive():
                proc.join()
                health = monitor.health()
                raise CaptureStartError(
                    f"capture of camera {self.camera.id!r} exited with {proc.exitcode} before attaching: "
                    f"{health.last_error or 'see its log'}",
                    proc.exitcode,
                    health.last_error,
                )
            if time.monotonic() > deadline:
                self.stop()
                raise CaptureStartError(f"capture of camera {self.camera.id!r} did not attach to its ring in "
                                        f"{timeout:g}s")
            time.sleep(0.01)
        log.info("camera %r: capture process %d started", self.camera.id, proc.pid)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the child and wait; SIGKILL it if it does not exit in ``timeout``. Returns its exit code."""
        proc = self._proc
        if proc is None:
            return None
        return stop_process(proc, timeout_s=timeout, on_kill=lambda: log.warning(
            "camera %r: capture process %d ignored SIGTERM for %gs; killing it", self.camera.id, proc.pid, timeout))

    def close(self) -> None:
        """Stop the child and remove the ring (readers opened on it must be closed by their owners)."""
        self.stop()
        if self._monitor is not None:
            self._monitor.close()
            self._monitor = None
        if self._owner is not None:
            self._owner.close(remove=True)
            self._owner = None

    def __enter__(self) -> "CaptureProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- status --------------------------------------------------------------------------------------

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def exitcode(self) -> int | None:
        """None while running (or never started); otherwise the child's exit code (negative: signal)."""
        if self._proc is None:
            return None
        if not self._proc.is_alive():
            self._proc.join(0)
        return self._proc.exitcode

    def health(self) -> CaptureHealth:
        if self._monitor is None:
            raise RuntimeError(f"capture of camera {self.camera.id!r} was never started")
        return self._monitor.health()

    def reader(self) -> RingReader:
        """A new reader on this camera's ring (the caller closes it). Other processes use RingReader(ring_path)."""
        if self._owner is None:
            raise RuntimeError(f"capture of camera {self.camera.id!r} was never started; no ring yet")
        return RingReader(self.ring_path)
