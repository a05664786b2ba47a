"""Triton Python model: a thin shell around PostprocessStage (appliance.detector.repository.stages.postprocess),
where the logic and its tests live."""

import _appliance_site  # noqa: F401  (written by appliance.triton.pymodels; must be the first import)
import triton_python_backend_utils as pb_utils

from appliance.detector.repository.stages.postprocess import PostprocessStage


class TritonPythonModel:
    def initialize(self, args):
        self.impl = PostprocessStage(pb_utils, args)

    def execute(self, requests):
        return self.impl.execute(requests)

    def finalize(self):
        self.impl.finalize()
        self.impl = None
