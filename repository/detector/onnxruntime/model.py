"""Triton Python model: a thin shell around OrtDetectorStage (appliance.detector.repository.stages.detector_ort),
where the logic and its tests live."""

import _appliance_site  # noqa: F401  (written by appliance.triton.pymodels; must be the first import)
import triton_python_backend_utils as pb_utils

from appliance.detector.repository.stages.detector_ort import OrtDetectorStage


class TritonPythonModel:
    def initialize(self, args):
        self.impl = OrtDetectorStage(pb_utils, args)

    def execute(self, requests):
        return self.impl.execute(requests)

    def finalize(self):
        self.impl.finalize()
        self.impl = None
