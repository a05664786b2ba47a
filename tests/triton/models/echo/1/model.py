import _appliance_site  # noqa: F401
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Y = 2 * X with a dynamic batch dimension."""

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return out
