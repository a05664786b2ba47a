import time

import _appliance_site  # noqa: F401
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Hands IMAGE on after SECONDS, whether or not the request is cancelled meanwhile: the step that is running
    when the appliance gives up on a frame (Triton 2.51 does not interrupt it)."""

    def execute(self, requests):
        out = []
        for request in requests:
            time.sleep(float(pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()[0]))
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("IMAGE_OUT", image)]))
        return out
