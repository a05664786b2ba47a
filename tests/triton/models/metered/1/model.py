import time

import _appliance_site  # noqa: F401
import numpy as np
import triton_python_backend_utils as pb_utils

from appliance.detector.repository.stages.common import StageMetrics


class TritonPythonModel:
    """MEAN = mean(IMAGE), counted in Triton's metrics the way the real pipeline stages count (StageMetrics)."""

    def initialize(self, args):
        self.metrics = StageMetrics(pb_utils, "metered", "test", args.get("model_instance_name", ""))

    def execute(self, requests):
        out = []
        for request in requests:
            started = time.perf_counter_ns()
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            mean = np.array([image.mean()], dtype=np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("MEAN", mean)]))
            self.metrics.observe(started)
        return out

    def finalize(self):
        self.metrics.close()
