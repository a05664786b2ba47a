import _appliance_site  # noqa: F401
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """One transformation per data type, so a test can tell each output was computed from its input."""

    def execute(self, requests):
        out = []
        for request in requests:
            get = lambda name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()  # noqa: E731
            s = np.array([bytes(v).upper() for v in get("S").reshape(-1)], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("U8_OUT", (get("U8") + 1).astype(np.uint8)),
                pb_utils.Tensor("F16_OUT", (get("F16") * 2).astype(np.float16)),
                pb_utils.Tensor("F32_OUT", (get("F32") + 0.5).astype(np.float32)),
                pb_utils.Tensor("I32_OUT", (get("I32") * -3).astype(np.int32)),
                pb_utils.Tensor("S_OUT", s),
            ]))
        return out
