"""CPU-host detector: ONNX Runtime inside a Python-backend model.

Triton's dynamic batcher hands ``execute`` the frames of several cameras at once. On a CPU, ONNX Runtime gains
nothing from a batch dimension (a batch of 4 costs slightly more per frame than 4 single runs), and its
intra-op threads leave cores idle between operators; running the frames of a batch side by side, one thread
each, keeps every core busy. So: a lone frame runs on the multi-threaded session (lowest latency); several
frames run in parallel on a single-threaded session (highest throughput). ``cpu_batch: tensor`` runs the batch
as one tensor instead. Parameters (config.pbtxt): ``onnx_path`` (default ``<version dir>/model.onnx``),
``intra_op_threads`` (0 = ORT's default, all cores), ``ort_spinning`` ("0"/"1"), ``cpu_batch``
("parallel"/"tensor"), ``parallel_workers`` (0 = one per core).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from appliance.modelrepo.stages.common import StageMetrics, error_response, model_parameters

log = logging.getLogger(__name__)


class OrtDetectorStage:
    def __init__(self, pb_utils: ModuleType, args: dict[str, str]) -> None:
        import onnxruntime as ort

        self.pb = pb_utils
        params = model_parameters(args)
        path = params.get("onnx_path") or str(Path(args["model_repository"]) / args["model_version"] / "model.onnx")
        spinning = params.get("ort_spinning") or "0"

        def session(threads: int) -> ort.InferenceSession:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            # Spinning idle threads would take the cores the pre/post stages need between batches.
            opts.add_session_config_entry("session.intra_op.allow_spinning", spinning)
            return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

        self.session = session(int(params.get("intra_op_threads") or 0))
        self.in_name = self.session.get_inputs()[0].name
        self.out_name = self.session.get_outputs()[0].name
        workers = int(params.get("parallel_workers") or 0) or (os.cpu_count() or 1)
        self.pool: ThreadPoolExecutor | None = None
        if (params.get("cpu_batch") or "parallel") == "parallel" and workers > 1:
            self.single = session(1)  # ORT's Run is thread-safe: the workers share it
            self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="detector")
        self.metrics = StageMetrics(pb_utils, "detector", params.get("profile_name", "detector"))

    def _run(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        """Outputs per request, in order."""
        frames = sum(len(b) for b in batches)
        if self.pool is None or frames == 1:
            x = batches[0] if len(batches) == 1 else np.concatenate(batches, axis=0)
            y = self.session.run([self.out_name], {self.in_name: x})[0]
        else:
            singles = [b[i:i + 1] for b in batches for i in range(len(b))]
            y = np.concatenate(list(self.pool.map(
                lambda f: self.single.run([self.out_name], {self.in_name: f})[0], singles)), axis=0)
        out, offset = [], 0
        for b in batches:
            out.append(y[offset:offset + len(b)])
            offset += len(b)
        return out

    def execute(self, requests: list[Any]) -> list[Any]:
        started = time.perf_counter_ns()
        batches = [self.pb.get_input_tensor_by_name(r, "INPUT").as_numpy() for r in requests]
        try:
            responses = [self.pb.InferenceResponse(output_tensors=[self.pb.Tensor("OUTPUT", y)])
                         for y in self._run(batches)]
        except Exception as exc:  # Triton already checked shapes and types: this is a model/runtime failure
            log.exception("detector failed")
            responses = [error_response(self.pb, f"detector: {exc}", invalid_arg=False) for _ in requests]
        for _ in requests:
            self.metrics.observe(started)
        return responses

    def finalize(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        self.metrics.close()
