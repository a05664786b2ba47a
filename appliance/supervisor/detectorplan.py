"""How the detector is laid out for this device's cameras, how many requests the scheduler keeps in flight, and
how a freshly loaded model is warmed up for them.

Chosen once at start from the config and the engine's build-time timing (appliance.detector.repository.layout), and logged
with why, so the start log says what the appliance will do with the machine.
"""

from __future__ import annotations

import logging
import math

from appliance.appconfig.app import AppConfig
from appliance.detector.engines.manager import InstalledEngine
from appliance.detector.repository.layout import DetectorLayout, detector_layout
from appliance.detector.serving.warmup import FrameShape, WarmupPlan

log = logging.getLogger("appliance.supervisor")
WARMUP_MAX_CONCURRENCY = 32  # a larger max_inflight only queues in Triton: no new batch size or instance to warm


def plan_detector(config: AppConfig, engine: InstalledEngine) -> tuple[DetectorLayout, int]:
    """The detector layout and the scheduler's ``max_inflight`` (the config's, else enough to keep it busy)."""
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


def plan_warmup(config: AppConfig, max_inflight: int | None) -> WarmupPlan:
    """Warm-up frames as the cameras deliver them (each size and channel order once), as many at once as the
    scheduler keeps in flight (the detector's batches and instances)."""
    shapes = dict.fromkeys(FrameShape(c.height, c.width, c.pixel_format.upper()) for c in config.cameras)
    return WarmupPlan(frames=config.pipeline.warmup_frames, shapes=tuple(shapes),
                      concurrency=min(max_inflight or 1, WARMUP_MAX_CONCURRENCY))
