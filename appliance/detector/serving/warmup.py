"""Warm-up: real inferences through a freshly loaded ensemble before any frame is routed to it.

A model's first inferences are slow (ONNX Runtime and TensorRT allocate and pick kernels, Python stages import
and fill caches, each detector instance and each batch size pays once), so without a warm-up the first frames
after start, an OTA switch, a rollback or a model reload pay for it, and may time out. ``warm_up`` sends
``frames`` rounds through the ensemble: each round one frame of every configured frame shape alone (batch
size 1), then ``concurrency`` frames of it at once (what the scheduler keeps in flight: larger detector
batches, every instance). The frames are fixed noise, so the stages do their usual work. It returns how long
that took and logs it; any failed request raises ``WarmupFailed``: a model that cannot infer a frame of the
configured size is not servable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from appliance.errors import ApplianceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FrameShape:
    """A frame as a camera's ring holds it: ``height`` x ``width`` x 3 in ``channel_order``."""

    height: int
    width: int
    channel_order: str = "BGR"


@dataclass(frozen=True)
class WarmupPlan:
    """``frames`` rounds (0: no warm-up) of ``shapes`` (empty: the model profile's input size), each alone and
    ``concurrency`` at once; each request may take ``timeout_s`` (a cold first inference is slow)."""

    frames: int = 2
    shapes: tuple[FrameShape, ...] = ()
    concurrency: int = 1
    timeout_s: float = 120.0


@dataclass(frozen=True)
class WarmupResult:
    requests: int
    seconds: float
    first_s: float | None  # the first (cold) request alone
    last_s: float | None   # the last lone request: what a frame costs once warm


class WarmupFailed(ApplianceError, RuntimeError):
    """A warm-up request failed: the message names the frame shape and Triton's error."""


class InferServer(Protocol):
    """What the warm-up needs from ``appliance.triton.Server``."""

    def infer_async(self, model: str, inputs: Any, outputs: Sequence[str] | None = None, *,
                    timeout_s: float | None = None) -> Any: ...


OUTPUTS = ("BOXES", "SCORES", "CLASSES")


def warmup_frame(shape: FrameShape) -> np.ndarray:
    """Fixed noise: the same frame each time, content enough for the stages to do their usual work."""
    return np.random.default_rng(0).integers(0, 256, (shape.height, shape.width, 3), dtype=np.uint8)


def warm_up(server: InferServer, ensemble: str, plan: WarmupPlan, default: FrameShape, label: str = "",
            clock: Callable[[], float] = time.monotonic) -> WarmupResult:
    """Run ``plan`` through ``ensemble``; raise ``WarmupFailed`` on the first failed request."""
    if plan.frames <= 0:
        return WarmupResult(0, 0.0, None, None)
    shapes = plan.shapes or (default,)
    frames = {shape: warmup_frame(shape) for shape in shapes}
    started = clock()
    requests, first, last = 0, None, None
    for _ in range(plan.frames):
        for shape, frame in frames.items():
            inputs = {"IMAGE": frame, "CHANNEL_ORDER": np.array([shape.channel_order.encode()], dtype=object)}
            t0 = clock()
            _wait(shape, [server.infer_async(ensemble, inputs, OUTPUTS, timeout_s=plan.timeout_s)])
            last = clock() - t0
            first = last if first is None else first
            requests += 1
            if plan.concurrency > 1:
                _wait(shape, [server.infer_async(ensemble, inputs, OUTPUTS, timeout_s=plan.timeout_s)
                              for _ in range(plan.concurrency)])
                requests += plan.concurrency
    result = WarmupResult(requests, clock() - started, first, last)
    log.info("warm-up of %s: %d inference(s) in %.2f s (%s; first %.0f ms, last alone %.0f ms)",
             label or ensemble, result.requests, result.seconds,
             ", ".join(f"{s.width}x{s.height} {s.channel_order}" for s in shapes),
             (first or 0) * 1000, (last or 0) * 1000)
    return result


def _wait(shape: FrameShape, futures: list[Any]) -> None:
    for future in futures:
        try:
            future.result()
        except Exception as exc:
            raise WarmupFailed(f"warm-up inference of a {shape.width}x{shape.height} {shape.channel_order} frame "
                               f"failed: {exc}") from exc
