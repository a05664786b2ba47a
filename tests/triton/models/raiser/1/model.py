import _appliance_site  # noqa: F401
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Fails every request: with an error response for X[0] < 0, by raising otherwise."""

    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()
        if x.size and x[0] < 0:
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input refused by raiser"))
                    for _ in requests]
        raise ValueError("raiser model exploded on purpose")
