import _appliance_site  # noqa: F401
import numpy as np
import triton_python_backend_utils as pb_utils

import appliance
from appliance.triton import dtypes  # a module of the editable install, imported inside the stub


class TritonPythonModel:
    """Proves numpy and the editable `appliance` import inside the stub; reports their versions."""

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            versions = np.array([appliance.__version__.encode(), np.__version__.encode()], dtype=np.object_)
            y = (x + dtypes.FP32).astype(np.float32)  # FP32 == 11
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y), pb_utils.Tensor("VERSIONS", versions)]))
        return out
