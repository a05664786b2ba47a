"""How many detector instances to run, and how many ONNX Runtime threads each gets.

TensorRT: one instance, batched. ONNX Runtime: one instance on every core (the lowest latency per frame) while
the load the cameras offer keeps it under ``BUSY_LIMIT`` busy at its build-time speed, else two instances with
half the cores each and no batches, which keep the cores busier under load. The measurements behind the rule:
docs/models.md, "Detector layout"."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

BUSY_LIMIT = 0.7  # offered frames/s x seconds per frame on every core, above which two instances serve more


@dataclass(frozen=True)
class DetectorLayout:
    instances: int
    intra_op_threads: int  # ONNX Runtime threads per instance; 0 = all cores (ORT's default)
    max_batch_size: int

    batches_help: bool = False  # a batch is cheaper per frame (a GPU engine); on a CPU it hardly is

    def describe(self) -> str:
        threads = "all cores" if self.intra_op_threads == 0 else f"{self.intra_op_threads} thread(s)"
        batches = "one frame at a time" if self.max_batch_size == 1 else f"batches up to {self.max_batch_size}"
        return f"{self.instances} detector instance(s) x {threads}, {batches}"

    def requests_to_keep_busy(self) -> int:
        """Frames in flight that keep every instance computing, plus one being pre/post-processed beside them.

        More only wait in Triton's queues: each one adds a frame period of latency (Little's law) and no
        throughput. Measured with 4 cameras x 10 fps on 2 cores (2 instances x 1 thread): 8 in flight 28.1
        results/s at 329 ms capture-to-result p50; 4: 28.6/s, 190 ms; 3: 28.4/s, 155 ms; 2: 26.4/s, 126 ms.
        """
        return self.instances * (self.max_batch_size if self.batches_help else 1) + 1


def offered_load(offered_fps: float, frame_ms: float | None) -> float | None:
    """The share of time one all-core instance would be busy serving ``offered_fps`` (None: no timing)."""
    if frame_ms is None:
        return None
    return math.inf if math.isinf(offered_fps) else offered_fps * frame_ms / 1000.0


def detector_layout(triton_kind: str, cameras: int, max_batch_size: int, instances: int | None = None,
                    cpus: int | None = None, offered_fps: float = math.inf,
                    frame_ms: float | None = None) -> DetectorLayout:
    """The layout for ``cameras`` cameras offering ``offered_fps`` in all (inf: as fast as their sources), for a
    detector taking ``frame_ms`` per frame on every core (None: unknown, the camera count decides).
    ``instances`` set by the operator wins (its threads split the cores)."""
    cpus = cpus or os.cpu_count() or 1
    if triton_kind != "onnxruntime":
        return DetectorLayout(instances or 1, 0, max_batch_size, batches_help=True)
    if instances is None:
        load = offered_load(offered_fps, frame_ms)
        one_keeps_up = cameras < 2 if load is None else load < BUSY_LIMIT
        if one_keeps_up or cpus < 2:
            return DetectorLayout(1, 0, max_batch_size)
        instances = 2
        max_batch_size = 1  # a batch is no cheaper on one thread and would idle the other instance
    return DetectorLayout(instances, 0 if instances == 1 else max(1, cpus // instances), max_batch_size)
