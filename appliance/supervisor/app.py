"""The appliance: one object that wires every part in order and holds their handles.

Start order (each step logs what it does; a failure says which step and why):
  MQTT publisher (spools until the broker answers) -> engines (build or cache hit, progress to systemd/MQTT)
  -> model repository for this device -> embedded Triton + the served model (the active OTA version, else the
  base model; docs/ota.md) -> capture processes -> scheduler -> health endpoint -> READY=1.
Each frame goes to the ensemble the OTA router names at submit time (an update moves traffic atomically).
Each tick checks the served models; one that Triton lost is reloaded with backoff while frames are dropped
(counted), and a crash loop is reported (docs/supervisor.md, "Model failures").
Stop order is the reverse, draining in-flight frames into the spool before the publisher closes.
"""

from __future__ import annotations

import logging
import math
import shutil
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from appliance.backoff import RestartPolicy
from appliance.config.app import AppConfig
from appliance.config.check import resolved_paths
from appliance.health.metrics import ApplianceMetrics
from appliance.health.server import HealthServer
from appliance.health.system import SystemMonitor
from appliance.health.tegrastats import TegrastatsMonitor, system_fields
from appliance.sdnotify import Notifier
from appliance.supervisor.cameras import CaptureChild, mqtt_camera_state
from appliance.supervisor.leftovers import reclaim_leftovers
from appliance.supervisor.children import ChildState, ChildSupervisor
from appliance.supervisor.modelprobe import ModelProbe, fault_from_error
from appliance.supervisor.modelreload import TritonReloader
from appliance.supervisor.recovery import PipelineRecovery, PipelineState
from appliance.supervisor.results import build_message
from appliance.supervisor.scheduler import Scheduler
from appliance.triton.errors import ServerStateError

log = logging.getLogger("appliance.supervisor")
# The scheduler sleeps until a camera rings its doorbell or a request completes; it looks at the rings this
# often anyway, in case a capture process could not ring (a missed ring costs at most this much latency).
IDLE_POLL_S = 0.05


class StartupError(RuntimeError):
    """The appliance could not start; the message names the step."""


@dataclass
class _Camera:
    id: str
    capture: Any  # CaptureProcess
    reader: Any = None  # RingReader, opened once the ring exists
    published_state: str | None = None
    health: Any = None  # the latest CaptureHealth read from the ring header


def capture_readings(health: Any) -> dict[str, Any]:
    """A camera's capture counters (appliance.capture.ring.CaptureHealth) for the health summary and MQTT health:
    ``ring_drops`` are frames overwritten before inference read them (latest wins), ``ring_full`` frames the
    camera could not write because every other slot was leased."""
    if health is None:
        return {}
    return {"fps": round(health.fps, 2), "frames": health.frames, "ring_drops": health.drops,
            "ring_full": health.ring_full, "decode_errors": health.decode_errors, "reconnects": health.reconnects,
            "stalls": health.stalls}


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
        self._cameras: dict[str, _Camera] = {}
        self._doorbell: Any = None  # appliance.capture.doorbell.Doorbell: capture processes wake the scheduler
        self.server: Any = None
        self.publisher: Any = None
        self.scheduler: Scheduler | None = None
        self.health_server: HealthServer | None = None
        self.repository_dir: Path | None = None
        self.engine: Any = None
        self.router: Any = None   # appliance.ota.router.Router: the route each frame takes
        self.ota: Any = None      # appliance.ota.manager.OtaManager
        self._switcher: Any = None  # appliance.ota.switcher.TritonSwitcher (its model_control lock)
        self._inbox: Any = None   # appliance.ota.delivery.InboxWatcher, when ota.inbox is set
        self._ota_commands: Any = None  # appliance.ota.delivery.OtaCommandHandler
        self._probe: ModelProbe | None = None
        self.recovery: PipelineRecovery | None = None  # the served pipeline's model failures and reloads
        self._published_pipeline = PipelineState.SERVING
        self._base_spec: Any = None
        self._repo_options: Any = None
        self._max_inflight: int | None = None  # the config's, or the detector layout's (_materialize_repository)
        self._last_error = ""
        self._completed = 0
        self.latencies_ms: deque[float] = deque(maxlen=10_000)  # capture-to-result, newest last
        self._published = 0
        self._lock = threading.Lock()
        self._started_at = clock()

    # -- start ---------------------------------------------------------------------------------------------
    def start(self, triton_timeout_s: float = 120.0) -> None:
        try:
            reclaim_leftovers(shm_root=self.config.paths.shm_root)
            self._start_tegrastats()
            self._start_publisher()
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
        from appliance.mqtt.publisher import MqttPublisher

        self._step(f"MQTT publisher for {self.config.mqtt.host}:{self.config.mqtt.port}")
        spool = self.config.mqtt.spool_path(self.paths["state_dir"])
        spool.parent.mkdir(parents=True, exist_ok=True)
        self.publisher = MqttPublisher(self.config.mqtt, spool)
        self.publisher.set_health_provider(self._health_for_mqtt)
        self.publisher.on_command("status", lambda _command: self.health_summary())
        self.publisher.start()

    def _build_engine(self) -> None:
        from appliance.engines.manager import ensure_engines

        model = self.config.model.name
        self._step(f"engine for {model} (a first build can take minutes; progress follows)")

        from appliance.supervisor.enginestatus import EngineStatusForwarder

        to_mqtt = EngineStatusForwarder(lambda suffix, payload: self.publisher.publish_device_event(
            suffix, payload, retain=True), self.config.mqtt.device_id)

        def progress(event: Any) -> None:
            self.metrics.engine_build.labels(model=event.model).set(event.percent)
            to_mqtt(event)

        (self.engine,) = ensure_engines(self.paths["engines_dir"], state_dir=self.paths["state_dir"],
                                        models_root=self.paths["models_dir"], builder=self.config.model.builder,
                                        models=[model], notifier=self.notifier, progress=progress)

    def _materialize_repository(self) -> None:
        """An empty live repository (it is derived: the OTA manager materializes what it loads into it) and the
        base model's spec (engines/ + repository/profiles), served when no OTA version is active."""
        from appliance.engines.repository import PROFILES
        from appliance.modelrepo.layout import detector_layout
        from appliance.modelrepo.materialize import RepositoryOptions
        from appliance.models.profile import load_profile
        from appliance.ota.switcher import ModelSpec

        self._step("model repository for this device")
        cameras = self.config.cameras
        offered_fps = sum(camera.fps or math.inf for camera in cameras)
        layout = detector_layout(self.engine.triton_kind, len(cameras), self.config.model.max_batch_size,
                                 self.config.model.detector_instances, offered_fps=offered_fps,
                                 frame_ms=self.engine.frame_ms)
        self._max_inflight = self.config.pipeline.max_inflight or layout.requests_to_keep_busy()
        log.info("detector layout: %s (%s, %d camera(s) offering %s, %s); %d request(s) in flight at most%s",
                 layout.describe(), self.engine.triton_kind, len(cameras),
                 "frames as fast as their sources" if math.isinf(offered_fps) else f"{offered_fps:g} fps",
                 "model.detector_instances set" if self.config.model.detector_instances
                 else "no build timing" if self.engine.frame_ms is None
                 else f"{self.engine.frame_ms:.1f} ms per frame on every core",
                 self._max_inflight, "" if self.config.pipeline.max_inflight else " (enough to keep it busy)")
        self._repo_options = RepositoryOptions(max_batch_size=layout.max_batch_size,
                                               queue_delay_us=self.config.model.queue_delay_us,
                                               detector_instances=layout.instances,
                                               intra_op_threads=layout.intra_op_threads)
        self.repository_dir = self.paths["state_dir"] / "repository"
        shutil.rmtree(self.repository_dir, ignore_errors=True)
        self.repository_dir.mkdir(parents=True)
        self._base_spec = ModelSpec(None, load_profile(PROFILES / f"{self.engine.model}.yaml"), self.engine)

    def _start_triton(self, timeout_s: float) -> None:
        from appliance.triton import Server, ServerOptions
        from appliance.triton.locate import locate

        self._step("embedded Triton")
        options = ServerOptions(
            repositories=[self.repository_dir], model_control="explicit",
            log_verbose=self.config.triton.log_verbose, log_info=self.config.triton.log_info,
            backend_config={"python": {"shm-default-byte-size": str(self.config.triton.python_shm_bytes)}},
        )
        self.server = Server(options, locate(self._triton_home)).start(timeout_s)
        self._start_ota()
        self._start_recovery()

    def _start_ota(self) -> None:
        """The OTA manager loads and routes what to serve (the active version, falling back to the base model),
        then takes updates from the ``ota`` MQTT command and, if configured, the inbox directory."""
        from appliance.ota.delivery import InboxWatcher, OtaCommandHandler
        from appliance.ota.errors import OtaRejected
        from appliance.ota.manager import OtaManager
        from appliance.ota.router import Router
        from appliance.ota.signing import TrustedKeys
        from appliance.ota.switcher import TritonSwitcher

        ota, state_dir = self.config.ota, self.paths["state_dir"]
        self.router = Router()
        switcher = self._switcher = TritonSwitcher(self.server, self.repository_dir, self.router,
                                                   options=self._repo_options,
                                                   drain_timeout_s=self.config.pipeline.drain_timeout_s)
        self.ota = OtaManager(state_dir, TrustedKeys.from_paths(ota.trusted_keys), switcher, config=ota,
                              status_cb=self._on_ota_status, base_spec=lambda: self._base_spec)
        self._step("loading the served model (the active OTA version, else the base model)")
        try:
            route = self.ota.start_serving()
        except OtaRejected as exc:
            raise StartupError(exc.reason) from exc
        log.info("serving %s (ensemble %s)", route.label, route.ensemble)
        if not ota.trusted_keys:
            log.info("OTA updates are off: ota.trusted_keys is empty, every bundle will be refused")
        self._ota_commands = OtaCommandHandler(self.ota, ota, state_dir / "ota" / "incoming")
        self.publisher.on_command("ota", self._ota_commands)
        if ota.inbox is not None:
            self._inbox = InboxWatcher(self.ota, ota.inbox, ota.inbox_poll_s).start()

    def _start_recovery(self) -> None:
        """Model failures of whatever the router serves now (an OTA switch changes it) are found by the tick
        and reloaded with backoff."""
        policy = self.config.pipeline.recovery
        self._probe = ModelProbe(self.server)
        self.recovery = PipelineRecovery(
            TritonReloader(self.server, self._probe, self.router.current, self._switcher.model_control),
            RestartPolicy(initial_backoff_s=policy.initial_backoff_s, max_backoff_s=policy.max_backoff_s,
                          max_restarts=policy.max_failures, window_s=policy.window_s),
            clock=self._clock, metrics=self.metrics)

    def _on_ota_status(self, status: Any) -> None:
        """Every OTA step (the manager logs it): a metric, and the retained ``<prefix>/<device>/ota/status``."""
        from appliance.mqtt.messages import ota_status_payload
        from appliance.ota.status import STATES

        for state in STATES:
            self.metrics.ota_state.labels(state=state).set(1 if state == status.state else 0)
        if self.publisher is not None:
            self.publisher.publish_device_event(
                "ota/status", ota_status_payload(self.config.mqtt.device_id, status.to_dict()), retain=True)

    def _start_cameras(self) -> None:
        from appliance.capture import CaptureProcess, reclaim_stale_rings
        from appliance.capture.doorbell import Doorbell

        self._doorbell = Doorbell()
        ids = {c.id for c in self.config.cameras}
        for path in reclaim_stale_rings(self.config.paths.shm_root, keep=ids):
            log.info("removed a leftover frame ring from an earlier run: %s", path)
        for camera in self.config.cameras:
            self._step(f"camera {camera.id}")
            process = CaptureProcess(camera, shm_root=self.config.paths.shm_root, doorbell=self._doorbell.address)
            child = CaptureChild(process)
            self._cameras[camera.id] = _Camera(camera.id, process)
            self._children.register(f"camera:{camera.id}", lambda c=child: c, RestartPolicy(
                initial_backoff_s=camera.backoff.initial_s, max_backoff_s=camera.backoff.max_s))
        self._children.start_all()

    def _start_scheduler(self) -> None:
        from appliance.capture import RingError, RingReader

        pipeline = self.config.pipeline
        self.scheduler = Scheduler(self._submit, self._on_result, max_inflight=self._max_inflight,
                                   per_camera_inflight=pipeline.per_camera_inflight, clock=self._clock,
                                   gate=self.recovery.drop_reason if self.recovery else None,
                                   on_drop=self._on_drop, wakeup=self._doorbell, idle_wait_s=IDLE_POLL_S)
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
                                          self._render_metrics, self.health_summary)

    # -- the frame path ------------------------------------------------------------------------------------
    def _on_drop(self, camera_id: str, reason: str) -> None:
        self.metrics.frames_dropped.labels(camera=camera_id, reason=reason).inc()

    def _submit(self, camera_id: str, lease: Any) -> "Future[Any]":
        meta = lease.meta
        route = self.router.acquire()  # released in _on_result, or here if the request never starts
        submitted = time.monotonic()
        try:
            future = self.server.infer_async(
                route.ensemble,
                {"IMAGE": lease.array, "CHANNEL_ORDER": np.array([meta.pixel_format.upper().encode()], dtype=object)},
                ["BOXES", "SCORES", "CLASSES"],
                request_id=f"{camera_id}:{meta.seq}", timeout_s=self.config.pipeline.request_timeout_s,
                on_inputs_released=lease.release,
            )
        except BaseException:
            self.router.release(route, False, 0.0)
            raise
        future.submitted_mono = submitted  # type: ignore[attr-defined]
        future.route = route  # type: ignore[attr-defined]
        return future

    def _on_result(self, camera_id: str, meta: Any, future: "Future[Any]") -> None:
        from appliance.mqtt.messages import ModelInfo

        done = time.monotonic()
        route = future.route  # type: ignore[attr-defined]
        submitted = getattr(future, "submitted_mono", done)
        ok, found = False, 0
        try:
            error = future.exception() if not future.cancelled() else None
            if future.cancelled() or error is not None:
                reason = type(error).__name__ if error is not None else "cancelled"
                self.metrics.inference_errors.labels(camera=camera_id, reason=reason).inc()
                fault = fault_from_error(error, route)
                if fault is not None and self.recovery is not None:  # stop sending frames now, reload next tick
                    self.recovery.note(route, fault, submitted)
                self._last_error = f"camera {camera_id} frame {meta.seq} ({route.label}): {error or 'cancelled'}"
                log.warning("inference failed: %s", self._last_error,
                            extra={"camera": camera_id, "stage": "inference"})
                return
            latency = {"queue": (submitted - meta.t_mono) * 1000, "inference": (done - submitted) * 1000,
                       "total": (done - meta.t_mono) * 1000}
            self.metrics.stage_latency.labels(stage="inference").observe(done - submitted)
            self.metrics.stage_latency.labels(stage="capture_to_result").observe(max(0.0, done - meta.t_mono))
            self.metrics.frames_inferred.labels(camera=camera_id).inc()
            self.latencies_ms.append(latency["total"])
            model = ModelInfo(route.model, route.version or "base", route.engine_key[:16])
            message = build_message(meta, future.result().outputs, model, route.class_names, latency)
            ok, found = True, len(message.detections)
            self.publisher.publish_detections(message)
            with self._lock:
                self._completed += 1
        finally:
            self.router.release(route, ok, done - submitted, found)

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
        self._refresh_mqtt_metrics()
        if self._ota_commands is not None:
            self._ota_commands.chunks.expire()  # an upload whose sender gave up frees its disk space
        self._check_models()
        if self._pipeline_progressing():
            self.notifier.watchdog()
        self.notifier.status(self.status_line())

    def _check_models(self) -> None:
        """Probe the served route (a few cheap calls, once a tick), reload what broke; tell MQTT at once when
        the pipeline's state changes."""
        if self.recovery is None or self._probe is None or self.router is None:
            return
        route = self.router.current()
        if route is None:
            return
        self.recovery.step(route, self._probe.faults(route))
        status = self.recovery.status()
        if status.state is not PipelineState.SERVING:
            self._last_error = status.line()
        elif self._published_pipeline is not PipelineState.SERVING:
            self._last_error = f"recovered: {self._last_error}"
        if status.state is not self._published_pipeline:
            self._published_pipeline = status.state
            if self.publisher is None:
                return
            try:
                self.publisher.publish_health_now()
            except Exception as exc:  # stopping: the next periodic health message says it
                log.debug("could not publish health now: %s", exc)

    def _refresh_cameras(self) -> None:
        from appliance.mqtt.messages import CameraStatus

        for cam in self._cameras.values():
            if cam.capture is None:
                continue
            try:
                health = cam.capture.health()
            except Exception as exc:  # ring not there yet (camera never started)
                log.debug("camera %s: no health yet: %s", cam.id, exc)
                continue
            self.metrics.camera_fps.labels(camera=cam.id).set(health.fps)
            self.metrics.camera_frames.labels(camera=cam.id).set(health.frames)
            self.metrics.camera_drops.labels(camera=cam.id).set(health.drops)
            self.metrics.camera_reconnects.labels(camera=cam.id).set(health.reconnects)
            self.metrics.camera_decode_errors.labels(camera=cam.id).set(health.decode_errors)
            self.metrics.camera_stalls.labels(camera=cam.id).set(health.stalls)
            self.metrics.camera_ring_full.labels(camera=cam.id).set(health.ring_full)
            cam.health = health
            state = mqtt_camera_state(health)
            self.metrics.camera_streaming.labels(camera=cam.id).set(1 if state == "streaming" else 0)
            if state != cam.published_state and self.publisher is not None:
                self.publisher.publish_camera_status(CameraStatus(cam.id, state, round(health.fps, 2),
                                                                  health.last_error or None))
                log.info("camera %s: %s%s", cam.id, state, f" ({health.last_error})" if health.last_error else "",
                         extra={"camera": cam.id, "stage": "capture"})
                cam.published_state = state

    def _refresh_mqtt_metrics(self) -> None:
        if self.publisher is None:
            return
        stats = self.publisher.stats()
        self.metrics.mqtt_connected.set(1 if stats.state.value == "connected" else 0)
        self.metrics.spool_messages.set(stats.spool.backlog)
        self.metrics.spool_dropped.set(stats.spool.dropped_oldest + stats.spool.dropped_newest
                                       + stats.spool.dropped_expired)
        self.metrics.published.set(stats.acked)
        if self.scheduler is not None:
            self.metrics.inflight.set(self.scheduler.inflight)

    def _pipeline_progressing(self) -> bool:
        """Feed the watchdog while frames finish, or while no camera has frames to offer (a dead camera is
        handled by capture restarts, not by restarting the whole service). A pipeline held for model recovery
        has nothing in flight but is not progressing: past ``watchdog_stall_s`` systemd may restart us."""
        if self.scheduler is None:
            return False
        now, stall = self._clock(), self.config.pipeline.watchdog_stall_s
        if now - self.scheduler.last_progress < stall:
            return True
        broken = self.recovery.broken_since if self.recovery is not None else None
        return self.scheduler.inflight == 0 and (broken is None or now - broken < stall)

    def status_line(self) -> str:
        streaming = sum(1 for c in self._cameras.values() if c.published_state == "streaming")
        fps = sum(s.submitted for s in self.scheduler.cameras()) if self.scheduler else 0
        elapsed = max(1e-6, self._clock() - self._started_at)
        mqtt = self.publisher.stats().state.value if self.publisher else "off"
        text = (f"{streaming}/{len(self.config.cameras)} cameras streaming, {fps / elapsed:.1f} inferences/s, "
                f"mqtt {mqtt}")
        if self.recovery is not None and self.recovery.state is not PipelineState.SERVING:
            text += f"; {self.recovery.status().line()}"
            return text  # the pipeline's state is the error that matters now
        return text + (f"; last error: {self._last_error}" if self._last_error else "")

    def health_summary(self) -> dict[str, Any]:
        cameras = {}
        for slot in self.scheduler.cameras() if self.scheduler else []:
            cam = self._cameras[slot.camera_id]
            cameras[slot.camera_id] = {"state": cam.published_state, "inferred": slot.submitted,
                                       "skipped": slot.skipped, "dropped": slot.dropped, "errors": slot.errors,
                                       **capture_readings(cam.health)}
        try:
            triton_ok = bool(self.server is not None and self.server.ready)
        except ServerStateError:  # stopping or stopped (the publisher's last health message comes after)
            triton_ok = False
        route = self.router.current() if self.router is not None else None
        pipeline = self.recovery.status() if self.recovery is not None else None
        serving = pipeline is None or pipeline.state is PipelineState.SERVING
        return {"ok": triton_ok and serving and self._pipeline_progressing(), "triton_ready": triton_ok,
                "status": self.status_line(), "model": route.label if route else None, "cameras": cameras,
                "pipeline": pipeline.to_dict() if pipeline is not None else None}

    def _pipeline_readings(self) -> dict[str, Any]:
        """The pipeline's state for the MQTT health message's ``system`` readings (flat: numbers and strings)."""
        if self.recovery is None:
            return {}
        status = self.recovery.status()
        return {"pipeline_state": status.state.value, "pipeline_failures": status.failures,
                "model_reloads": status.reloads,
                "pipeline_error": status.line() if status.state is not PipelineState.SERVING else None}

    def _health_for_mqtt(self) -> dict[str, Any]:
        summary = self.health_summary()
        reading = self._system.read()
        system: dict[str, Any] = {"cpu_percent": reading.cpu_percent,
                                  "mem_available_bytes": reading.mem_available_bytes,
                                  **{f"temp_{k}": v for k, v in reading.temperatures_c.items()}}
        if self._tegrastats is not None and self._tegrastats.active:
            tegra = self._tegrastats.latest()
            system["tegrastats"] = self._tegrastats.health()
            system.update(system_fields(tegra) if tegra is not None else {})
        return {"cameras": summary["cameras"], "system": {**system, **self._pipeline_readings()}}

    def _render_metrics(self) -> bytes:
        text = self.metrics.render()
        if self.server is not None:
            text += self.server.metrics().encode()
        return text

    # -- stop ----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop capture, drain in-flight frames, close Triton, flush the publisher to its spool."""
        self.notifier.stopping("stopping: draining in-flight frames")
        if self._inbox is not None:
            self._inbox.stop()
        if self.scheduler is not None:
            if not self.scheduler.stop(self.config.pipeline.drain_timeout_s):
                log.warning("stop: gave up waiting for in-flight frames after %.1f s",
                            self.config.pipeline.drain_timeout_s)
        self._children.stop_all(lambda child: child.process.stop())
        if self._tegrastats is not None:
            self._tegrastats.stop()
        for cam in self._cameras.values():
            if cam.reader is not None:
                cam.reader.close()
            cam.capture.close()
        if self._doorbell is not None:
            self._doorbell.close()
            self._doorbell = None
        if self.server is not None:
            self.server.stop()
        if self.health_server is not None:
            self.health_server.close()
        if self.publisher is not None:
            self.publisher.stop()
        log.info("stopped")
