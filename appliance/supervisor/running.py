"""The running appliance as a value: one frozen record per start step, each the record before it plus the part its
step started, in start order:

``Connected`` (the MQTT publisher) -> ``Built`` (the engine and the detector's plan) -> ``TritonUp`` (embedded
Triton) -> ``Serving`` (the OTA manager serves a model, recovery watches it) -> ``Capturing`` (a capture process
per camera) -> ``Running`` (the scheduler feeds the frame path; the health endpoint).

``Appliance`` holds the latest record, and its ``stop`` ends what that record names. A step that fails stops what
it started itself before it raises, so a record only ever names parts that run.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from appliance.appconfig.app import AppConfig, TritonConfig
from appliance.capture.config import RECORDED_SOURCES, CameraConfig
from appliance.detector.calibration.collector import start_calibration_feed
from appliance.health.metrics import ApplianceMetrics
from appliance.mqtt.publisher import MqttPublisher
from appliance.pipeline.clipkeeper import ClipKeeper
from appliance.pipeline.eventstage import CameraAnalytics, StageParts, camera_stage, start_analytics
from appliance.pipeline.framepath import FramePath, Model, Reports
from appliance.pipeline.layouts import Layouts
from appliance.pipeline.scheduler import Scheduler
from appliance.pipeline.sink import Sink, Sinks
from appliance.pipeline.sinks import EventMirror, MqttSink, OpcUaSink, PageSink, RestreamSink
from appliance.pipeline.snapshots import SnapshotWorker
from appliance.restream.server import RestreamServer
from appliance.restream.tap import Restream
from appliance.supervisor.cameras import Capture
from appliance.supervisor.detectorsetup import DetectorSetup
from appliance.supervisor.servedmodel import Served
from appliance.triton.locate import locate
from appliance.triton.server import Server, ServerOptions
from appliance.web.auth import Auth, is_loopback, load_users
from appliance.web.feed import EventFeed
from appliance.web.files import clip_routes
from appliance.web.live import LiveFrames
from appliance.webserver.routes import Routes
from appliance.webserver.server import WebServer

log = logging.getLogger(__name__)
# The scheduler sleeps until a camera rings its doorbell or a request completes; it looks at the rings this
# often anyway, in case a capture process could not ring (a missed ring costs at most this much latency).
IDLE_POLL_S = 0.05


@dataclass(frozen=True)
class Stage:
    """How far the start got; this base record: nothing yet (the appliance's own monitors aside)."""


@dataclass(frozen=True)
class Connected(Stage):
    """The publisher runs: messages spool until the broker answers, the ``status`` and ``ota`` commands answer."""

    publisher: MqttPublisher


@dataclass(frozen=True)
class Built(Connected):
    """The base model's engine is built (or was in the cache) and the detector planned for these cameras."""

    detector: DetectorSetup


@dataclass(frozen=True)
class TritonUp(Built):
    """Embedded Triton runs; it serves nothing yet."""

    server: Server


@dataclass(frozen=True)
class Serving(TritonUp):
    """A model is served (the active OTA version, else the base model), warmed up and watched for failures."""

    served: Served


@dataclass(frozen=True)
class Capturing(Serving):
    """A capture process per camera, each writing its ring."""

    capture: Capture


@dataclass(frozen=True)
class Running(Capturing):
    """Frames flow from the rings to the publisher; the health endpoint serves when ``health.enabled``."""

    inference: Inference
    health_server: WebServer | None


@dataclass(frozen=True)
class Inference:
    """The scheduler leasing frames from the rings into the frame path, with each camera's analytics (kept across
    model switches) and the worker that encodes their snapshots; the frame path holds the calibration feed."""

    frames: FramePath
    scheduler: Scheduler
    analytics: dict[str, CameraAnalytics]  # per camera with an ``analytics:`` section (a reload changes it)
    snapshots: SnapshotWorker | None  # when a camera takes snapshots
    layouts: Layouts  # each camera's zones and lines: the config file's, or the page's
    live: LiveFrames  # the newest frame of a camera someone watches on the page
    feed: EventFeed   # the newest events, for the page
    new_stage: Callable[[CameraConfig], CameraAnalytics]  # a camera's stage, as at start (a reload's cameras)
    sinks: Sinks  # every consumer of results, in order (result_sinks)
    clips: ClipKeeper | None = None  # the events' clips of the cameras that record (a reload changes which)
    restream: Restream | None = None  # the RTSP server and what feeds it, when ``restream.enabled``

    def clip_routes(self, auth: Auth | None, hosts: Sequence[str]) -> Routes:
        """``/events/<id>.mp4`` when a camera records (appliance.web.files), behind ``auth`` like the snapshots."""
        return clip_routes(self.clips.clip_file, auth, hosts) if self.clips is not None else Routes()

    def stop(self, drain_timeout_s: float) -> None:
        """No new frames; in-flight ones drain (their results reach the sinks), then what the snapshot worker
        and the sinks queued is written, sink by sink in their order."""
        if not self.scheduler.stop(drain_timeout_s):
            log.warning("stop: gave up waiting for in-flight frames after %.1f s", drain_timeout_s)
        if self.snapshots is not None:  # what the drained frames queued, before the publisher closes
            self.snapshots.stop()
        self.sinks.stop()
        if self.frames.calibration is not None:
            self.frames.calibration.stop()


def start_restream(config: AppConfig, analytics: Mapping[str, CameraAnalytics],
                   packets: Path | None) -> Restream | None:
    """The RTSP server on the health endpoint's address, with the page's users unless that is loopback; the
    compressed cameras' own packets reach it on the socket ``packets`` (passthrough ``/<camera>``)."""
    if not config.restream.enabled:
        return None
    host = config.health.host
    users = None if is_loopback(host) else {u.name: u.password_hash for u in load_users(config.web).values()}
    passthrough = [c.id for c in config.cameras if c.source.type in RECORDED_SOURCES] if packets else []
    server = RestreamServer(config.restream, host, [c.id for c in config.cameras], users,
                            packets=packets, passthrough=passthrough).start()
    return Restream(server, analytics)


def start_triton(built: Built, triton: TritonConfig, home: Path | None, metrics: ApplianceMetrics,
                 timeout_s: float) -> TritonUp:
    """Embedded Triton on the detector's live repository (explicit model control: it serves nothing yet); its
    version and the engine's builder go to the build-info metric."""
    options = ServerOptions(
        repositories=[built.detector.repository], model_control="explicit",
        log_verbose=triton.log_verbose, log_info=triton.log_info,
        backend_config={"python": {"shm-default-byte-size": str(triton.python_shm_bytes)}},
    )
    distribution = locate(home)
    server = Server(options, distribution).start(timeout_s)
    engine = built.detector.engine
    metrics.record_build_info(triton_version=distribution.version or "unknown",
                              builder=engine.builder, triton_kind=engine.triton_kind)
    return TritonUp(built.publisher, built.detector, server)


def result_sinks(capturing: Capturing, page: PageSink, restream: Restream | None, mirror: EventMirror | None,
                 clips: ClipKeeper, extra: Sequence[Sink]) -> Sinks:
    """Every consumer of results, in the order each result reaches them and they stop: a new one is a line here."""
    return Sinks([
        MqttSink(capturing.publisher),                   # detections, events, counts: the wire (spooled)
        page,                                            # the page's event list and live picture
        *([OpcUaSink(mirror)] if mirror is not None else []),  # the OPC UA server's events and counts
        *([RestreamSink(restream)] if restream is not None else []),  # RTSP out: watched cameras' frames
        clips,                                           # event clips (planned as each event is made)
        *extra,                                          # Appliance(sinks=...)
    ])


def start_inference(capturing: Capturing, config: AppConfig, paths: Mapping[str, Path], metrics: ApplianceMetrics,
                    *, clock: Callable[[], float], on_error: Callable[[str], None],
                    mirror: EventMirror | None = None, sinks: Sequence[Sink] = ()) -> Inference:
    """Analytics for the served model's classes, the frame path through the router to the sinks, and the scheduler
    reading every camera's ring, started; ``on_error`` takes the appliance's last error (status line, health
    summary); ``mirror``: the OPC UA server's feed; ``sinks``: more sinks, after the appliance's own."""
    served, engine = capturing.served, capturing.detector.engine
    with ExitStack() as undo:  # what this step started, stopped if a later part of it fails
        route = served.router.current()
        class_names = route.class_names if route else ()

        def serving_classes() -> tuple[str, ...]:  # after an OTA switch, the new model's
            now = served.router.current()
            return now.class_names if now is not None else class_names

        layouts, live, feed = Layouts(config.cameras, paths["state_dir"], serving_classes), LiveFrames(), EventFeed()
        recording = {c.id: c.record for c in config.cameras if c.record.enabled}
        # Also with no camera recording yet: a reload may start one (ClipKeeper.apply).
        clips = ClipKeeper(paths["state_dir"], recording, capturing.publisher.publish_clip, metrics=metrics)
        undo.callback(clips.stop)
        analytics: dict[str, CameraAnalytics] = {}  # filled below; the restream draws their zones and lines
        restream = start_restream(config, analytics, capturing.capture.restream_socket)
        if restream is not None:
            undo.callback(restream.stop)
        results = result_sinks(capturing, PageSink(feed, live), restream, mirror, clips, sinks)
        stages, parts = start_analytics(layouts.cameras(config.cameras), class_names,
                                        StageParts(results, metrics, clips=clips), paths["state_dir"] / "snapshots",
                                        capturing.publisher.publish_snapshot)
        analytics.update(stages)
        layouts.stages = analytics
        if parts.snapshots is not None:
            undo.callback(parts.snapshots.stop)
        calibration = start_calibration_feed(paths["engines_dir"], engine.model, paths["state_dir"],
                                             len(config.cameras), engine.precision)
        if calibration is not None:
            undo.callback(calibration.stop)
        frames = FramePath(Model(capturing.server, served.router, served.recovery, config.pipeline.request_timeout_s),
                           results, Reports(metrics, on_error, clock), analytics=analytics, calibration=calibration)
        scheduler = Scheduler(frames.submit, frames.on_result, max_inflight=capturing.detector.max_inflight,
                              per_camera_inflight=config.pipeline.per_camera_inflight, clock=clock,
                              gate=served.recovery.drop_reason, on_drop=frames.on_drop,
                              wakeup=capturing.capture.doorbell, idle_wait_s=IDLE_POLL_S)
        capturing.capture.open_readers(config.cameras, scheduler, on_error)
        scheduler.start()
        undo.pop_all()  # all of it runs: Appliance.stop ends it from here on
    new_stage = functools.partial(camera_stage, class_names=class_names, parts=parts)
    return Inference(frames, scheduler, analytics, parts.snapshots, layouts, live, feed, new_stage, results, clips,
                     restream)
