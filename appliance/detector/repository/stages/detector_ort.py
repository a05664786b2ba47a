"""CPU-host detector: ONNX Runtime inside a Python-backend model.

Triton's dynamic batcher hands ``execute`` several requests (frames of several cameras); they are concatenated
into one batch, run once, and split back: one stub round trip for all of them. (ONNX Runtime itself is no
faster per frame on a batch on a CPU; on a GPU engine it is.) Requests Triton has cancelled are answered
CANCELLED and left out of the batch; when all are, the session does not run (``common``: cancellation).
Parameters (config.pbtxt): ``onnx_path`` (default ``<version dir>/model.onnx``), ``intra_op_threads`` (0 = ORT's
default), ``ort_spinning`` ("0"/"1").
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from appliance.detector.repository.stages.common import (
    StageMetrics,
    cancelled_response,
    error_response,
    is_cancelled,
    model_parameters,
)

log = logging.getLogger(__name__)


class OrtDetectorStage:
    def __init__(self, pb_utils: ModuleType, args: dict[str, str]) -> None:
        import onnxruntime as ort

        self.pb = pb_utils
        params = model_parameters(args)
        path = params.get("onnx_path") or str(Path(args["model_repository"]) / args["model_version"] / "model.onnx")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(params.get("intra_op_threads") or 0)
        # Spinning idle threads would take the cores the pre/post stages need between batches.
        opts.add_session_config_entry("session.intra_op.allow_spinning", params.get("ort_spinning") or "0")
        self.session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        self.in_name = self.session.get_inputs()[0].name
        # One head output is answered as OUTPUT; a wrapped graph's BOXES/SCORES/CLASSES/COUNT keep their names.
        names = [o.name for o in self.session.get_outputs()]
        self.outputs = {names[0]: "OUTPUT"} if len(names) == 1 else {n: n for n in names}
        self.metrics = StageMetrics(pb_utils, "detector", params.get("profile_name", "detector"),
                                    args.get("model_instance_name", ""))

    def execute(self, requests: list[Any]) -> list[Any]:
        started = time.perf_counter_ns()
        responses: list[Any] = [None] * len(requests)
        live = []
        for i, request in enumerate(requests):
            if is_cancelled(request):
                responses[i] = cancelled_response(self.pb, "detector")
                self.metrics.cancelled()
            else:
                live.append(i)
        if not live:  # every frame timed out: the session does not run
            return responses
        batches = [self.pb.get_input_tensor_by_name(requests[i], "INPUT").as_numpy() for i in live]
        try:
            x = batches[0] if len(batches) == 1 else np.concatenate(batches, axis=0)
            ys = self.session.run(list(self.outputs), {self.in_name: x})
            offset = 0
            for i, b in zip(live, batches):
                outs = [self.pb.Tensor(name, y[offset:offset + len(b)]) for name, y in zip(self.outputs.values(), ys)]
                responses[i] = self.pb.InferenceResponse(output_tensors=outs)
                offset += len(b)
        except Exception as exc:  # Triton already checked shapes and types: this is a model/runtime failure
            log.exception("detector failed")
            for i in live:
                responses[i] = error_response(self.pb, f"detector: {exc}", invalid_arg=False)
        for _ in live:
            self.metrics.observe(started)
        return responses

    def finalize(self) -> None:
        self.metrics.close()
