"""The detector as this device runs it, set up once at start: the base model's engine (built, or found in the
cache, its progress on MQTT), its layout for these cameras with the requests kept in flight (logged with why, so
the start log says what the appliance will do with the machine), the warm-up of a freshly loaded model, and the
live repository Triton loads from.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.appconfig.app import AppConfig
from appliance.detector.engines.devicerepo import PROFILES
from appliance.detector.engines.manager import InstalledEngine, ensure_engines
from appliance.detector.engines.progress import FINAL_PHASES, ProgressEvent
from appliance.detector.profile import load_profile
from appliance.detector.repository.layout import DetectorLayout, detector_layout
from appliance.detector.repository.materialize import RepositoryOptions
from appliance.detector.serving.switcher import ModelSpec
from appliance.detector.serving.warmup import FrameShape, WarmupPlan
from appliance.mqtt.messages import engine_status_payload
from appliance.sdnotify import Notifier

log = logging.getLogger(__name__)
WARMUP_MAX_CONCURRENCY = 32  # a larger max_inflight only queues in Triton: no new batch size or instance to warm
ENGINE_STATUS = "engines/status"  # the retained device topic of the build's progress (docs/mqtt.md)

Publish = Callable[[str, Mapping[str, Any]], None]  # (device topic suffix, payload), published retained


@dataclass(frozen=True)
class DetectorSetup:
    """What the rest of the start serves and schedules with."""

    engine: InstalledEngine  # the base model's
    max_inflight: int  # the scheduler's: the config's, else enough to keep the detector busy
    options: RepositoryOptions  # the detector's layout, for every model the OTA manager materializes
    warmup: WarmupPlan  # a freshly loaded model's, before traffic moves to it
    repository: Path  # the live repository: derived, emptied here (the OTA manager materializes into it)
    base: ModelSpec  # served when no OTA version is active (engines/ + repository/profiles)


class EngineStatusForwarder:
    """The build's progress to the retained ``<prefix>/<device>/engines/status``. A TensorRT build reports many
    times a second and a heartbeat every 30 s; a subscriber needs every phase and a pulse, not every tick: each new
    phase and each final event goes at once, within a phase at most one update per ``min_interval_s``."""

    def __init__(self, publish: Publish, device_id: str, *, min_interval_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._publish, self._device_id = publish, device_id
        self._min_interval_s = min_interval_s
        self._clock, self._wall = clock, wall
        self._last: tuple[str, str, float] | None = None  # model, phase, when published

    def __call__(self, event: ProgressEvent) -> None:
        now = self._clock()
        last = self._last
        if (last is not None and last[:2] == (event.model, event.phase) and event.phase not in FINAL_PHASES
                and now - last[2] < self._min_interval_s):
            return
        self._last = (event.model, event.phase, now)
        self._publish(ENGINE_STATUS, engine_status_payload(self._device_id, event.to_dict(), self._wall()))


def build_engine(config: AppConfig, paths: Mapping[str, Path], notifier: Notifier,
                 progress: Callable[[ProgressEvent], None]) -> InstalledEngine:
    """The configured model's engine, from the cache or built now (minutes on a first boot)."""
    (engine,) = ensure_engines(paths["engines_dir"], state_dir=paths["state_dir"], models_root=paths["models_dir"],
                               builder=config.model.builder, models=[config.model.name], notifier=notifier,
                               progress=progress)
    return engine


def set_up_detector(config: AppConfig, engine: InstalledEngine, state_dir: Path) -> DetectorSetup:
    """Plan the detector for ``engine`` and empty the live repository under ``state_dir``."""
    layout, max_inflight = plan_detector(config, engine)
    options = RepositoryOptions(max_batch_size=layout.max_batch_size, queue_delay_us=config.model.queue_delay_us,
                                detector_instances=layout.instances, intra_op_threads=layout.intra_op_threads)
    repository = state_dir / "repository"
    shutil.rmtree(repository, ignore_errors=True)
    repository.mkdir(parents=True)
    base = ModelSpec(None, load_profile(PROFILES / f"{engine.model}.yaml"), engine)
    return DetectorSetup(engine, max_inflight, options, plan_warmup(config, max_inflight), repository, base)


def plan_detector(config: AppConfig, engine: InstalledEngine) -> tuple[DetectorLayout, int]:
    """The detector layout (appliance.detector.repository.layout: from the config and the engine's build-time
    timing) and the scheduler's ``max_inflight`` (the config's, else enough to keep it busy)."""
    cameras, model = config.cameras, config.model
    offered_fps = sum(camera.fps or math.inf for camera in cameras)
    layout = detector_layout(engine.triton_kind, len(cameras), model.max_batch_size, model.detector_instances,
                             offered_fps=offered_fps, frame_ms=engine.frame_ms)
    max_inflight = config.pipeline.max_inflight or layout.requests_to_keep_busy()
    log.info("detector layout: %s (%s, %d camera(s) offering %s, %s); %d request(s) in flight at most%s",
             layout.describe(), engine.triton_kind, len(cameras),
             "frames as fast as their sources" if math.isinf(offered_fps) else f"{offered_fps:g} fps",
             "model.detector_instances set" if model.detector_instances
             else "no build timing" if engine.frame_ms is None
             else f"{engine.frame_ms:.1f} ms per frame on every core",
             max_inflight, "" if config.pipeline.max_inflight else " (enough to keep it busy)")
    return layout, max_inflight


def plan_warmup(config: AppConfig, max_inflight: int) -> WarmupPlan:
    """Warm-up frames as the cameras deliver them (each size and channel order once), as many at once as the
    scheduler keeps in flight (the detector's batches and instances)."""
    shapes = dict.fromkeys(FrameShape(height=c.frame_size[1], width=c.frame_size[0],
                                      channel_order=c.pixel_format.upper()) for c in config.cameras)
    return WarmupPlan(frames=config.pipeline.warmup_frames, shapes=tuple(shapes),
                      concurrency=min(max_inflight, WARMUP_MAX_CONCURRENCY))
