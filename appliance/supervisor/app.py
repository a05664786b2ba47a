"""The appliance: one object that wires every part in order and holds their handles.

Start order (each step logged; a failure says which step and why): MQTT publisher (spools until the broker
answers) -> engines -> model repository -> embedded Triton + the served model (the active OTA version, else the
base model; docs/ota.md), warmed up with frames of the cameras' sizes -> capture processes -> analytics +
scheduler -> health endpoint -> READY=1. Each tick checks the served models (docs/supervisor.md, "Model
failures"). Stop drains in-flight frames into the spool before the publisher closes. A frame's way from the ring
to the publisher is ``framepath.FramePath`` (with the camera's ``eventstage.CameraAnalytics``); the status line,
health summary and metrics text are ``reporting``'s; the publisher and the commands it answers ``mqttface``'s;
what is served and how it changes (router, OTA manager and its ways in, model recovery) ``servedmodel``'s.
"""

from __future__ import annotations

import functools
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Callable, cast

from appliance.appconfig.app import AppConfig
from appliance.appconfig.check import resolved_paths
from appliance.backoff import RestartPolicy
from appliance.capture import CaptureProcess, RingDirectory, RingError, RingReader
from appliance.capture.doorbell import Doorbell
from appliance.engines.manager import InstalledEngine, ensure_engines
from appliance.engines.progress import ProgressEvent
from appliance.engines.repository import PROFILES
from appliance.health.metrics import ApplianceMetrics
from appliance.health.server import HealthServer
from appliance.health.system import SystemMonitor
from appliance.health.tegrastats import TegrastatsMonitor
from appliance.modelrepo.materialize import RepositoryOptions
from appliance.models.profile import load_profile
from appliance.mqtt.publisher import MqttPublisher
from appliance.ota.errors import OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.status import OtaStatus
from appliance.sdnotify import Notifier
from appliance.serving.recovery import PipelineRecovery
from appliance.serving.router import Router
from appliance.serving.switcher import ModelSpec
from appliance.sparkplug.node import EdgeNode
from appliance.supervisor import reporting
from appliance.supervisor.cameras import CaptureChild, SupervisedCamera
from appliance.supervisor.children import ChildState, ChildSupervisor
from appliance.supervisor.detectorsetup import EngineStatusForwarder, plan_detector, plan_warmup
from appliance.supervisor.eventstage import CameraAnalytics, start_analytics
from appliance.supervisor.calibframes import start_calibration_feed
from appliance.supervisor.framepath import FramePath
from appliance.supervisor.tritonorphans import reclaim_triton_orphans
from appliance.supervisor.mqttface import make_publisher
from appliance.supervisor.scheduler import Lease, Scheduler
from appliance.supervisor.servedmodel import ServedModel
from appliance.supervisor.snapshots import SnapshotWorker
from appliance.supervisor.sparkplugreadings import readings_from_summary
from appliance.triton.locate import locate
from appliance.triton.server import Server, ServerOptions

log = logging.getLogger("appliance.supervisor")
# The scheduler sleeps until a camera rings its doorbell or a request completes; it looks at the rings this
# often anyway, in case a capture process could not ring (a missed ring costs at most this much latency).
IDLE_POLL_S = 0.05


class StartupError(RuntimeError):
    """The appliance could not start; the message names the step."""


def _not_serving(camera_id: str, lease: Lease) -> Any:
    """The scheduler's submit while no frame path is wired (capture run without Triton, as some tests do); the
    scheduler releases the lease of a submit that raises."""
    raise RuntimeError("no model is served: Triton was not started")


class Appliance:
    def __init__(self, config: AppConfig, *, notifier: Notifier | None = None, triton_home: Path | None = None,
                 metrics: ApplianceMetrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.notifier = notifier or Notifier()
        self.metrics = metrics or ApplianceMetrics()
        self.paths = resolved_paths(config)
        self._triton_home = triton_home or config.triton.home
        self._clock = clock
        self._children = ChildSupervisor(clock)
        self._system = SystemMonitor()
        interval_ms = config.health.tegrastats_interval_ms
        self._tegrastats = TegrastatsMonitor(interval_ms) if interval_ms else None
        self._cameras: dict[str, SupervisedCamera] = {}
        self._doorbell: Doorbell | None = None  # capture processes ring it to wake the scheduler
        self._ring_dir: RingDirectory | None = None  # this run's private folder for the frame rings
        self.server: Server | None = None
        self.publisher: MqttPublisher | None = None
        self.sparkplug: EdgeNode | None = None  # when mqtt.sparkplug is set (docs/sparkplug.md)
        self.scheduler: Scheduler | None = None
        self.frames: FramePath | None = None  # what the scheduler submits through and hands results to
        self.health_server: HealthServer | None = None
        self.analytics: dict[str, CameraAnalytics] = {}  # per camera with analytics; kept across model switches
        self.snapshots: SnapshotWorker | None = None
        self.repository_dir: Path | None = None
        self.engine: InstalledEngine | None = None
        self._engine_progress: ProgressEvent | None = None  # the build's latest event (health summary)
        # router, OTA manager, model recovery (the properties below): what is served and how that changes
        self.served = ServedModel(config.ota, self.paths["state_dir"], self._on_ota_status)
        self._base_spec: ModelSpec | None = None
        self._repo_options: RepositoryOptions | None = None
        self._max_inflight: int | None = None  # the config's, or the detector layout's (_materialize_repository)
        self._last_error = ""
        self._started_at = clock()

    # -- start ---------------------------------------------------------------------------------------------
    def start(self, triton_timeout_s: float = 120.0) -> None:
        try:
            reclaim_triton_orphans()  # the Python backend's regions are in /dev/shm, whatever paths.shm_root says
            self._start_tegrastats()
            self._start_publisher()
            self._start_sparkplug()
            self._build_engine()
            self._materialize_repository()
            self._start_triton(triton_timeout_s)
            self._start_cameras()
            self._start_scheduler()
            self._start_health()
        except Exception as exc:
            self._last_error = str(exc)
            self.notifier.status(f"failed to start: {exc}")
            self.stop()
            raise
        self.notifier.ready(self.status_line())
        log.info("ready: %s", self.status_line())

    def _step(self, what: str) -> None:
        log.info("start: %s", what)
        self.notifier.status(f"starting: {what}")

    def _start_tegrastats(self) -> None:
        """Jetson only: a missing binary is normal (x86 hosts, containers without it) and never an error."""
        if self._tegrastats is None:
            return
        if self._tegrastats.start():
            log.info("tegrastats every %d ms for GPU load, EMC, temperatures and power", self._tegrastats.interval_ms)
        else:
            log.info("no tegrastats on PATH: GPU load and EMC are not reported (sysfs readings still are)")

    def _start_publisher(self) -> None:
        self._step(f"MQTT publisher for {', '.join(str(b) for b in self.config.mqtt.brokers)}")
        # `ota` before the connect: what the broker kept for this device while it was away waits for the manager
        self.publisher = make_publisher(self.config, self.paths["state_dir"], health=self._health_for_mqtt,
                                        status=self.health_summary, ota=self.served.late)
        self.publisher.start()

    def _start_sparkplug(self) -> None:
        """The Sparkplug B edge node on its own connection; its readings are the health summary's."""
        if self.config.mqtt.sparkplug is None:
            return
        self._step("Sparkplug B edge node")
        self.sparkplug = EdgeNode(self.config.mqtt, lambda: readings_from_summary(self.health_summary()),
                                  self.paths["state_dir"]).start()

    def _build_engine(self) -> None:
        model = self.config.model.name
        self._step(f"engine for {model} (a first build can take minutes; progress follows)")
        publisher = self.publisher
        assert publisher is not None, "the publisher starts first"
        to_mqtt = EngineStatusForwarder(lambda suffix, payload: publisher.publish_device_event(
            suffix, payload, retain=True), self.config.mqtt.device_id)

        def progress(event: ProgressEvent) -> None:
            self.metrics.engine_build.labels(model=event.model).set(event.percent)
            self._engine_progress = event
            to_mqtt(event)

        (self.engine,) = ensure_engines(self.paths["engines_dir"], state_dir=self.paths["state_dir"],
                                        models_root=self.paths["models_dir"], builder=self.config.model.builder,
                                        models=[model], notifier=self.notifier, progress=progress)

    def _materialize_repository(self) -> None:
        """An empty live repository (it is derived: the OTA manager materializes what it loads into it) and the
        base model's spec (engines/ + repository/profiles), served when no OTA version is active."""
        self._step("model repository for this device")
        assert self.engine is not None, "the engine is built first"
        layout, self._max_inflight = plan_detector(self.config, self.engine)
        self._repo_options = RepositoryOptions(max_batch_size=layout.max_batch_size,
                                               queue_delay_us=self.config.model.queue_delay_us,
                                               detector_instances=layout.instances,
                                               intra_op_threads=layout.intra_op_threads)
        self.repository_dir = self.paths["state_dir"] / "repository"
        shutil.rmtree(self.repository_dir, ignore_errors=True)
        self.repository_dir.mkdir(parents=True)
        self._base_spec = ModelSpec(None, load_profile(PROFILES / f"{self.engine.model}.yaml"), self.engine)

    def _start_triton(self, timeout_s: float) -> None:
        self._step("embedded Triton")
        assert self.repository_dir is not None, "the repository is made first"
        options = ServerOptions(
            repositories=[self.repository_dir], model_control="explicit",
            log_verbose=self.config.triton.log_verbose, log_info=self.config.triton.log_info,
            backend_config={"python": {"shm-default-byte-size": str(self.config.triton.python_shm_bytes)}},
        )
        distribution = locate(self._triton_home)
        self.server = Server(options, distribution).start(timeout_s)
        assert self.engine is not None, "the engine is built first"
        self.metrics.record_build_info(triton_version=distribution.version or "unknown",
                                       builder=self.engine.builder, triton_kind=self.engine.triton_kind)
        self._start_ota()
        self._start_recovery()

    def _start_ota(self) -> None:
        """The OTA manager loads and routes what to serve (the active version, falling back to the base model),
        then takes updates from the ``ota`` MQTT command and, if configured, the inbox directory and the fleet
        group's desired state (docs/fleet-rollout.md)."""
        assert self.server and self.repository_dir and self.publisher, "Triton, the repository, the publisher first"
        self._step("loading the served model (the active OTA version, else the base model)")
        try:
            self.served.start_ota(self.server, self.repository_dir, self.publisher, options=self._repo_options,
                                  drain_timeout_s=self.config.pipeline.drain_timeout_s,
                                  warmup=plan_warmup(self.config, self._max_inflight), base_spec=self._base_model)
        except OtaRejected as exc:
            raise StartupError(exc.reason) from exc

    def _base_model(self) -> ModelSpec:
        assert self._base_spec is not None, "the repository step sets it before the OTA manager starts"
        return self._base_spec

    def _start_recovery(self) -> None:
        """Model failures of whatever the router serves now (an OTA switch changes it) are found by the tick
        and reloaded with backoff."""
        assert self.server is not None, "Triton starts first"
        self.served.start_recovery(self.server, self.config.pipeline.recovery, self._clock, self.metrics)

    @property
    def router(self) -> Router | None:
        return self.served.router  # the route each frame takes

    @property
    def ota(self) -> OtaManager | None:
        return self.served.ota

    @property
    def recovery(self) -> PipelineRecovery | None:
        return self.served.recovery  # the served pipeline's model failures and reloads

    def _on_ota_status(self, status: OtaStatus) -> None:
        reporting.report_ota_status(self.metrics, self.publisher, self.config.mqtt.device_id, status)

    def _start_cameras(self) -> None:
        doorbell = self._doorbell = Doorbell()
        rings = self._ring_dir = RingDirectory.create(self.config.paths.shm_root)  # private: see docs/capture.md
        for camera in self.config.cameras:
            self._step(f"camera {camera.id}")
            process = CaptureProcess(camera, shm_root=rings.path, doorbell=doorbell.address)
            self._cameras[camera.id] = SupervisedCamera(camera.id, process)
            self._children.register(f"camera:{camera.id}", functools.partial(CaptureChild, process), RestartPolicy(
                initial_backoff_s=camera.backoff.initial_s, max_backoff_s=camera.backoff.max_s))
        self._children.start_all()

    def _start_scheduler(self) -> None:
        pipeline = self.config.pipeline
        if self.server is not None and self.router is not None and self.publisher is not None:
            route = self.router.current()
            self.analytics, self.snapshots = start_analytics(
                self.config.cameras, route.class_names if route else (), self.publisher, self.metrics,
                self.paths["state_dir"] / "snapshots")
            assert self.engine is not None, "the engine is built first"
            calibration = start_calibration_feed(self.paths["engines_dir"], self.engine.model, self.paths["state_dir"],
                                                 len(self.config.cameras), self.engine.precision)
            self.frames = FramePath(self.server, self.router, self.publisher, self.recovery, self.metrics,
                                    request_timeout_s=pipeline.request_timeout_s, on_error=self._note_error,
                                    analytics=self.analytics, calibration=calibration)
        frames = self.frames
        assert self._max_inflight is not None, "the detector layout (or the config) sets it first"
        self.scheduler = Scheduler(frames.submit if frames else _not_serving,
                                   frames.on_result if frames else lambda *_: None,
                                   max_inflight=self._max_inflight,
                                   per_camera_inflight=pipeline.per_camera_inflight, clock=self._clock,
                                   gate=self.recovery.drop_reason if self.recovery else None,
                                   on_drop=frames.on_drop if frames else None, wakeup=self._doorbell,
                                   idle_wait_s=IDLE_POLL_S)
        for camera in self.config.cameras:
            cam = self._cameras[camera.id]
            try:
                cam.reader = RingReader(cam.capture.ring_path)
            except RingError as exc:  # the ring could not even be created (e.g. /dev/shm full): say so, go on
                self._last_error = f"camera {camera.id}: {exc}"
                log.error("camera %s will not be inferred: %s", camera.id, exc)
                continue
            self.scheduler.add_camera(camera.id, cam.reader, camera.fps)
        self.scheduler.start()

    def _start_health(self) -> None:
        if not self.config.health.enabled:
            return
        self._step(f"health endpoint on {self.config.health.host}:{self.config.health.port}")
        self.health_server = HealthServer(self.config.health.host, self.config.health.port,
                                          lambda: reporting.render_metrics(self.metrics, self.server),
                                          self.health_summary, self.snapshots.store.http if self.snapshots else None)

    # -- periodic work -------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Restart dead cameras, refresh readings, publish camera state changes, feed the watchdog."""
        for record in self._children.poll():
            if record.state is ChildState.CRASH_LOOP:
                self._last_error = f"{record.name} is in a crash loop (exit code {record.last_exitcode})"
        self._refresh_cameras()
        self.metrics.record_system(self._system.read())
        if self._tegrastats is not None and self._tegrastats.active:
            self.metrics.record_tegrastats(self._tegrastats.latest(), self._tegrastats.exits)
        reporting.record_metrics(self.metrics, self.publisher, self.scheduler)
        for camera_id, stage in self.analytics.items():
            stage.publish_counts_if_due()
            self.metrics.record_analytics(camera_id, stage.summary())
        self.served.expire_uploads()
        self._check_models()
        if self._pipeline_progressing():
            self.notifier.watchdog()
        self.notifier.status(self.status_line())

    def _check_models(self) -> None:
        self._last_error = self.served.check(self.publisher, self._last_error)

    def _note_error(self, text: str) -> None:
        self._last_error = text

    def _refresh_cameras(self) -> None:
        for cam in self._cameras.values():
            cam.refresh(self.metrics, self.publisher)

    def _pipeline_progressing(self) -> bool:
        return reporting.pipeline_progressing(self.scheduler, self.recovery, self._clock(),
                                              self.config.pipeline.watchdog_stall_s)

    # -- reporting (appliance.supervisor.reporting) ---------------------------------------------------------
    def status_line(self) -> str:
        rate = self.frames.rate.per_second() if self.frames is not None else 0.0
        return reporting.status_line(self._cameras, len(self.config.cameras), rate, self.publisher, self.recovery,
                                     self._last_error)

    def health_summary(self) -> dict[str, Any]:
        summary = reporting.health_summary(self._cameras, self.scheduler, self.server, self.router, self.recovery,
                                           progressing=self._pipeline_progressing(), status=self.status_line())
        summary["analytics"] = {camera_id: stage.summary() for camera_id, stage in self.analytics.items()}
        return {**summary, **reporting.service_readings(
            uptime_s=self._clock() - self._started_at, scheduler=self.scheduler,
            recent_per_s=self.frames.rate.per_second() if self.frames else 0.0,
            # deque.copy() is one C call: the completion thread's appends cannot interleave with it
            latencies_ms=self.frames.latencies_ms.copy() if self.frames else (), publisher=self.publisher,
            engine=self.engine, engine_progress=self._engine_progress,
            ota=self.ota.status() if self.ota else None)}

    def _health_for_mqtt(self) -> dict[str, Any]:
        return reporting.health_for_mqtt(self.health_summary(), self._system.read(), self._tegrastats,
                                         self.recovery)

    # -- stop ----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop capture, drain in-flight frames, close Triton, flush the publisher to its spool."""
        self.notifier.stopping("stopping: draining in-flight frames")
        self.served.close_commands()
        if self.sparkplug is not None:  # NDEATH first: a SCADA host sees the node go, not its parts one by one
            self.sparkplug.stop()
        self.served.stop()  # no more updates from the inbox or the fleet group
        if self.scheduler is not None:
            if not self.scheduler.stop(self.config.pipeline.drain_timeout_s):
                log.warning("stop: gave up waiting for in-flight frames after %.1f s",
                            self.config.pipeline.drain_timeout_s)
        if self.snapshots is not None:  # what the drained frames queued, before the publisher closes
            self.snapshots.stop()
        if self.frames is not None and self.frames.calibration is not None:
            self.frames.calibration.stop()
        self._children.stop_all(lambda child: cast(CaptureChild, child).process.stop())
        if self._tegrastats is not None:
            self._tegrastats.stop()
        # Triton before the rings: a frame still in flight when the drain gave up holds a lease whose memory Triton
        # reads in place; stopping the server fails such requests and hands their leases back.
        if self.server is not None:
            self.server.stop()
        for cam in self._cameras.values():
            cam.close()
        if self._ring_dir is not None:
            self._ring_dir.close()
        if self._doorbell is not None:
            self._doorbell.close()
            self._doorbell = None
        if self.health_server is not None:
            self.health_server.close()
        if self.publisher is not None:
            self.publisher.stop()
        log.info("stopped")

