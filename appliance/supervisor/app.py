"""The appliance: one object that starts every part in order, holds the record of what runs, ticks and stops.

Start order (each step logged; a failure says which step and why), each step's record in ``running``: Triton
processes a dead run left are reclaimed -> MQTT publisher (spools until the broker answers) -> the Sparkplug node
and the OPC UA server, when configured -> engine and detector plan -> embedded Triton -> the served model (the
active OTA version, else the base model; docs/ota.md), warmed up with frames of the cameras' sizes -> capture
processes -> scheduler and frame path -> health endpoint -> READY=1. Each tick checks the served models
(docs/supervisor.md, "Model failures"). Stop drains in-flight frames into the spool before the publisher closes.
The status line, health summary and metrics text are ``reporting``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from appliance.appconfig.app import AppConfig
from appliance.appconfig.check import resolved_paths
from appliance.detector.engines.progress import ProgressEvent
from appliance.detector.serving.recovery import PipelineRecovery
from appliance.detector.serving.router import Router
from appliance.errors import ApplianceError
from appliance.health.metrics import ApplianceMetrics
from appliance.health.system import SystemMonitor
from appliance.health.tegrastats import TegrastatsMonitor
from appliance.mqtt.config import MqttConfig
from appliance.mqtt.publisher import MqttPublisher
from appliance.opcua.errors import OpcUaStartError
from appliance.opcua.feed import Feed
from appliance.ota.commandsig import signature_check
from appliance.ota.delivery import is_read_only
from appliance.ota.errors import OtaRejected
from appliance.ota.manager import OtaManager
from appliance.ota.signing import TrustedKeys
from appliance.ota.status import OtaStatus
from appliance.pipeline.sink import Sink
from appliance.sdnotify import Notifier
from appliance.sparkplug.node import EdgeNode
from appliance.supervisor import faces, reloader, reporting, running
from appliance.supervisor.cameras import CaptureChild, SupervisedCamera, set_up_capture
from appliance.supervisor.children import ChildState, ChildSupervisor
from appliance.supervisor.detectorsetup import EngineStatusForwarder, build_engine, set_up_detector
from appliance.supervisor.httpserver import open_http
from appliance.supervisor.latecameras import LateCameras, Waiting
from appliance.supervisor.reloadplan import ReloadPlan
from appliance.supervisor.running import Built, Capturing, Connected, Inference, Running, Serving, Stage, TritonUp
from appliance.supervisor.servedmodel import LateHandler, start_serving
from appliance.supervisor.sparkplugreadings import readings_from_summary
from appliance.supervisor.tritonorphans import reclaim_triton_orphans
from appliance.triton.server import Server
from appliance.webserver.server import WebServer

if TYPE_CHECKING:  # asyncua is imported only when an opcua: section asks for the server
    from appliance.opcua.server import OpcUaServer

log = logging.getLogger(__name__)


class StartupError(ApplianceError, RuntimeError):
    """The appliance could not start; the message names the step."""


class NotRunningError(ApplianceError, RuntimeError):
    """A call that needs the running appliance came before ``start`` returned."""


class Appliance:
    def __init__(self, config: AppConfig, *, notifier: Notifier | None = None, triton_home: Path | None = None,
                 metrics: ApplianceMetrics | None = None, clock: Callable[[], float] = time.monotonic,
                 late: LateCameras | None = None, sinks: Sequence[Sink] = ()) -> None:
        """``late``: the cameras waiting for their size; ``sinks``: more consumers of results (result_sinks)."""
        self.config, self._sinks = config, tuple(sinks)
        self._late = late if late is not None else LateCameras()
        self.notifier, self.metrics = notifier or Notifier(), metrics or ApplianceMetrics()
        self.paths = resolved_paths(config)
        self._triton_home = triton_home or config.triton.home
        self._clock = clock
        self._children = ChildSupervisor(clock)
        self._system = SystemMonitor(state_dir=self.paths["state_dir"])
        interval_ms = config.health.tegrastats_interval_ms
        self._tegrastats = TegrastatsMonitor(interval_ms) if interval_ms else None
        # When mqtt.sparkplug is set (docs/sparkplug.md): a second face on its own connection, started after the
        # publisher; its readings are the health summary's.
        self._sparkplug = self._new_node(config.mqtt) if config.mqtt.sparkplug is not None else None
        # When opcua is set (docs/opcua.md): counts and events reach its feed beside MQTT, readings by sampling.
        self._opcua_feed = Feed() if config.opcua is not None else None
        self._opcua: OpcUaServer | None = None
        self._stopping = False
        self._late_ota = LateHandler("the OTA manager", wait_s=60.0)  # the `ota` command until the manager runs
        self._now: Stage = Stage()  # how far the start got (appliance.supervisor.running); Running once started
        self._engine_progress: ProgressEvent | None = None  # the build's latest event (health summary)
        self._last_error, self._started_at = "", clock()
        self._reloaded: reloader.ReloadOutcome | None = None  # the last reload's outcome (health summary)

    # -- start ---------------------------------------------------------------------------------------------
    def start(self, triton_timeout_s: float = 120.0) -> None:
        """Each step takes the record of the steps before it and returns its own, held at once so that ``stop``
        (here, when a later step fails) ends what it started."""
        try:
            reclaim_triton_orphans()  # the Python backend's regions are in /dev/shm, whatever paths.shm_root says
            self._start_tegrastats()
            self._now = connected = self._start_publisher()
            self._start_sparkplug()
            self._start_opcua(connected)
            self._now = built = self._build_engine(connected)
            self._now = up = self._start_triton(built, triton_timeout_s)
            self._now = serving = self._serve(up)
            self._now = capturing = self._set_up_capture(serving)
            self._children.start_all()
            self._now = running = self._start_inference(capturing)
            if self.config.health.enabled:
                self._step(f"health endpoint on {self.config.health.host}:{self.config.health.port}")
            self._now = replace(running, health_server=self._http(self.config, running))
            self._late.start(running.publisher, self.metrics)
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

    def _start_publisher(self) -> Connected:
        """The publisher, with its spool, the operators' keys that sign commands, and the commands it answers
        (docs/mqtt.md, "Signed commands"): ``status``, and ``ota`` before the connect, so that what the broker kept
        for the device while it was away (a persistent session) finds its handler."""
        mqtt, state_dir = self.config.mqtt, self.paths["state_dir"]
        self._step(f"MQTT publisher for {', '.join(str(b) for b in mqtt.brokers)}")
        spool = mqtt.spool_path(state_dir)
        spool.parent.mkdir(parents=True, exist_ok=True)
        operators = TrustedKeys.from_paths(mqtt.commands.operator_keys or self.config.ota.trusted_keys)
        publisher = MqttPublisher(mqtt, spool, signature_check=signature_check(operators),
                                  nonce_path=state_dir / "mqtt-command-nonces.log", group=self.config.ota.group)
        if not mqtt.commands.require_signature:
            log.warning("mqtt.commands.require_signature is false: anyone who can publish to %s may roll back or "
                        "replace the model", publisher.topics.command_filter)
        publisher.set_health_provider(self._health_for_mqtt)
        publisher.on_command("status", lambda _command: self.health_summary(), read_only=True)
        publisher.on_command("ota", self._late_ota, read_only=is_read_only)
        try:
            publisher.start()
        except BaseException:
            publisher.stop()  # closes what a start that failed halfway opened
            raise
        return Connected(publisher)

    def _start_sparkplug(self) -> None:
        if self._sparkplug is not None:
            self._step("Sparkplug B edge node")
            self._sparkplug.start()

    def _new_node(self, mqtt: MqttConfig) -> EdgeNode:
        return EdgeNode(mqtt, lambda: readings_from_summary(self.health_summary()), self.paths["state_dir"])

    def _start_opcua(self, connected: Connected) -> None:
        section = self.config.opcua
        if section is None or self._opcua_feed is None:
            return
        self._step(f"OPC UA server on {section.host}:{section.port}")
        try:
            self._opcua = self._new_opcua(self.config)
        except OpcUaStartError as exc:
            raise StartupError(str(exc)) from exc

    def _new_opcua(self, config: AppConfig) -> OpcUaServer:
        from appliance.supervisor.opcuasetup import start_opcua  # asyncua: only when configured

        assert config.opcua is not None and self._opcua_feed is not None and isinstance(self._now, Connected)
        return start_opcua(config, config.opcua, self.paths["state_dir"], self._opcua_feed,
                           boot_id=self._now.publisher.boot_id, summary=self.health_summary,
                           phase=lambda: (isinstance(self._now, Running), self._stopping), reset_line=self._reset_line)

    def _reset_line(self, camera_id: str, line: str) -> bool:
        inference = self._inference()
        stage = inference.analytics.get(camera_id) if inference else None
        return stage.reset_line(line) if stage is not None else False

    def _build_engine(self, connected: Connected) -> Built:
        """The engine, its progress to the metrics, the health summary and the retained MQTT engine status; then
        the detector planned for these cameras, and an empty live repository."""
        model = self.config.model.name
        self._step(f"engine for {model} (a first build can take minutes; progress follows)")
        publisher = connected.publisher
        to_mqtt = EngineStatusForwarder(lambda suffix, payload: publisher.publish_device_event(
            suffix, payload, retain=True), self.config.mqtt.device_id)

        def progress(event: ProgressEvent) -> None:
            self.metrics.engine_build.labels(model=event.model).set(event.percent)
            self._engine_progress = event
            to_mqtt(event)

        engine = build_engine(self.config, self.paths, self.notifier, progress)
        self._step("model repository for this device")
        return Built(publisher, set_up_detector(self.config, engine, self.paths["state_dir"]))

    def _start_triton(self, built: Built, timeout_s: float) -> TritonUp:
        self._step("embedded Triton")
        return running.start_triton(built, self.config.triton, self._triton_home, self.metrics, timeout_s)

    def _serve(self, up: TritonUp) -> Serving:
        """The OTA manager loads and routes what to serve (the active version, falling back to the base model),
        then takes updates from the ``ota`` MQTT command and, if configured, the inbox directory and the fleet
        group's desired state (docs/fleet-rollout.md); model failures are reloaded with backoff."""
        self._step("loading the served model (the active OTA version, else the base model)")
        try:
            served = start_serving(up.server, up.detector, up.publisher, self._late_ota, config=self.config,
                                   state_dir=self.paths["state_dir"], on_status=self._on_ota_status,
                                   clock=self._clock, metrics=self.metrics)
        except OtaRejected as exc:
            raise StartupError(exc.reason) from exc
        return Serving(up.publisher, up.detector, up.server, served)

    def _set_up_capture(self, serving: Serving) -> Capturing:
        capture = set_up_capture(self.config.cameras, self.config.paths.shm_root, self._children, self._step,
                                 self.paths["state_dir"] / "recordings", self.config.restream.enabled)
        return Capturing(serving.publisher, serving.detector, serving.server, serving.served, capture)

    def _start_inference(self, capturing: Capturing) -> Running:
        inference = running.start_inference(capturing, self.config, self.paths, self.metrics, clock=self._clock,
                                    on_error=self._note_error, mirror=self._opcua_feed, sinks=self._sinks)
        return Running(capturing.publisher, capturing.detector, capturing.server, capturing.served,
                       capturing.capture, inference, health_server=None)

    def _http(self, config: AppConfig, running: Running) -> WebServer | None:  # at start, and by a reload
        return open_http(config, running, self.health_summary, self.metrics,
                         lambda: [c.id for c in self.config.cameras])

    def _on_ota_status(self, status: OtaStatus) -> None:
        reporting.report_ota_status(self.metrics, self.publisher, self.config.mqtt.device_id, status)

    def _note_error(self, text: str) -> None:
        self._last_error = text

    # -- what runs: the record, and its parts as the reports read them (None before the step that starts it) ---
    @property
    def running(self) -> Running:
        if not isinstance(self._now, Running):
            raise NotRunningError("the appliance is not running: start() has not returned")
        return self._now

    @property
    def publisher(self) -> MqttPublisher | None:
        return self._now.publisher if isinstance(self._now, Connected) else None

    @property
    def server(self) -> Server | None:
        return self._now.server if isinstance(self._now, TritonUp) else None

    @property
    def router(self) -> Router | None:
        return self._now.served.router if isinstance(self._now, Serving) else None  # the route each frame takes

    @property
    def opcua(self) -> OpcUaServer | None:
        return self._opcua

    @property
    def ota(self) -> OtaManager | None:
        return self._now.served.ota if isinstance(self._now, Serving) else None

    @property
    def recovery(self) -> PipelineRecovery | None:
        return self._now.served.recovery if isinstance(self._now, Serving) else None  # model failures, reloads

    def _cameras(self) -> Mapping[str, SupervisedCamera]:
        return dict(self._now.capture.cameras) if isinstance(self._now, Capturing) else {}  # a copy: reloads

    def _inference(self) -> Inference | None:
        return self._now.inference if isinstance(self._now, Running) else None

    def reload(self, new: AppConfig | None, problems: Sequence[str], source: str,
               late: Sequence[Waiting] = ()) -> None:
        """What changed to ``new`` applied, the rest named; None: refused (docs/supervisor.md, "Reload").
        ``late``: the cameras of the new config that wait for their size (set when it is applied)."""
        if new is not None:
            self._late.replace(late)
        self._reloaded, self.config, self._last_error, self._now = reloader.reload_running(
            self.running, self._children, self.config, new, problems, source, self._reloaded, self._last_error,
            self._http, self._restart_faces)

    def _restart_faces(self, plan: ReloadPlan, old: AppConfig, now: AppConfig,
                       on_error: Callable[[str], None]) -> ReloadPlan:
        """The Sparkplug node and the OPC UA server each restarted alone if the plan names a change of it."""
        self._sparkplug, plan = faces.restart_sparkplug(self._sparkplug, plan, old.mqtt, now.mqtt, self._new_node,
                                                        on_error)
        self._opcua, plan = faces.restart_opcua(self._opcua, plan, old, now, self._new_opcua, on_error)
        return plan

    # -- periodic work -------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Restart dead cameras, refresh readings, publish camera state changes, feed the watchdog."""
        for record in self._children.poll():
            if record.state is ChildState.CRASH_LOOP:
                self._last_error = f"{record.name} is in a crash loop (exit code {record.last_exitcode})"
        for camera in self._late.answered():
            self.config = reloader.start_camera(camera, self.running, self._children, self.config, self._note_error)
        for cam in self._cameras().values():
            cam.refresh(self.metrics, self.publisher)
        self.metrics.record_system(self._system.read())
        if self._tegrastats is not None and self._tegrastats.active:
            self.metrics.record_tegrastats(self._tegrastats.latest(), self._tegrastats.exits)
        inference = self._inference()
        reporting.record_metrics(self.metrics, self.publisher, inference.scheduler if inference else None,
                                 inference.restream if inference else None)
        for camera_id, stage in inference.analytics.items() if inference else ():
            stage.publish_counts_if_due()
            self.metrics.record_analytics(camera_id, stage.summary())
        now = self._now
        if isinstance(now, Serving):
            now.served.expire_uploads()
            self._last_error = now.served.check(now.publisher, self._last_error)
        if self._pipeline_progressing():
            self.notifier.watchdog()
        self.notifier.status(self.status_line())

    def _pipeline_progressing(self) -> bool:
        inference = self._inference()
        return reporting.pipeline_progressing(inference.scheduler if inference else None, self.recovery,
                                              self._clock(), self.config.pipeline.watchdog_stall_s)

    # -- reporting (appliance.supervisor.reporting) ---------------------------------------------------------
    def status_line(self) -> str:
        inference = self._inference()
        rate = inference.frames.rate.per_second() if inference else 0.0
        return reporting.status_line(self._cameras(), len(self.config.cameras), rate, self.publisher, self.recovery,
                                     self._last_error, late=len(self._late))

    def health_summary(self) -> dict[str, Any]:
        inference = self._inference()
        scheduler = inference.scheduler if inference else None
        summary = reporting.health_summary(self._cameras(), scheduler, self.server, self.router, self.recovery,
                                           progressing=self._pipeline_progressing(), status=self.status_line(),
                                           problems=reporting.problems(self.publisher, self._system, self.config),
                                           late=self._late.readings())
        summary["analytics"] = {} if inference is None else {
            camera_id: {**stage.summary(), "layout": inference.layouts.anonymous_source(camera_id)}
            for camera_id, stage in list(inference.analytics.items())}  # a reload may change it meanwhile
        summary["reload"] = self._reloaded.as_dict() if self._reloaded else None  # the last reload's outcome
        summary["restream"] = inference.restream.readings() if inference and inference.restream else None
        return {**summary, **reporting.service_readings(
            uptime_s=self._clock() - self._started_at, scheduler=scheduler,
            recent_per_s=inference.frames.rate.per_second() if inference else 0.0,
            # deque.copy() is one C call: the completion thread's appends cannot interleave with it
            latencies_ms=inference.frames.latencies_ms.copy() if inference else (), publisher=self.publisher,
            engine=self._now.detector.engine if isinstance(self._now, Built) else None,
            engine_progress=self._engine_progress, ota=self.ota.status() if self.ota else None)}

    def _health_for_mqtt(self) -> dict[str, Any]:
        return reporting.health_for_mqtt(self.health_summary(), self._system.read(), self._tegrastats, self.recovery)

    # -- stop ----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop capture, drain in-flight frames, close Triton, flush the publisher to its spool: in this order, and
        only what the start got to (after a failed step, what the steps before it started)."""
        now = self._now
        self._stopping = True
        if self._opcua is not None:
            self._opcua.halt()  # OPC UA clients see Halted while the rest stops
        self.notifier.stopping("stopping: draining in-flight frames")
        self._late_ota.close()  # an `ota` command still waiting for the manager gets its reply now
        self._late.stop()
        if self._sparkplug is not None:  # NDEATH first: a SCADA host sees the node go, not its parts one by one
            self._sparkplug.stop()
        if isinstance(now, Serving):
            now.served.stop()  # no more updates from the inbox or the fleet group
        if isinstance(now, Running):
            now.inference.stop(self.config.pipeline.drain_timeout_s)
        self._children.stop_all(lambda child: cast(CaptureChild, child).process.stop())
        if self._tegrastats is not None:
            self._tegrastats.stop()
        if self._opcua is not None:
            self._opcua.stop()
        # Triton before the rings: a frame still in flight when the drain gave up holds a lease whose memory Triton
        # reads in place; stopping the server fails such requests and hands their leases back.
        if isinstance(now, TritonUp):
            now.server.stop()
        if isinstance(now, Capturing):
            now.capture.close()
        if isinstance(now, Running) and now.health_server is not None:
            now.health_server.close()
        if isinstance(now, Connected):
            now.publisher.stop()
        log.info("stopped")
