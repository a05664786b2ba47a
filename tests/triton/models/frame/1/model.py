import _appliance_site  # noqa: F401
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Reads a whole HxWx3 frame and returns the sum of its bytes, so every byte must have arrived."""

    def execute(self, requests):
        out = []
        for request in requests:
            frame = pb_utils.get_input_tensor_by_name(request, "FRAME").as_numpy()
            total = np.array([frame.sum(dtype=np.uint64)], dtype=np.uint64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("CHECKSUM", total)]))
        return out
