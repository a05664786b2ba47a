import time

import _appliance_site  # noqa: F401
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Works for SECONDS unless Triton cancels the request.

    Writes "started" to the MARKER path (if not empty) on entry and "cancelled" or "finished" at the end,
    so tests can see that a cancellation really reached the model.
    """

    def execute(self, requests):
        out = []
        for request in requests:
            seconds = float(pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()[0])
            marker = bytes(pb_utils.get_input_tensor_by_name(request, "MARKER").as_numpy()[0]).decode()
            if marker:
                with open(marker, "w") as f:
                    f.write("started")
            end = time.monotonic() + seconds
            cancelled = False
            while time.monotonic() < end:
                if request.is_cancelled():
                    cancelled = True
                    break
                time.sleep(0.01)
            if marker:
                with open(marker, "w") as f:
                    f.write("cancelled" if cancelled else "finished")
            if cancelled:
                out.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)))
            else:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("DONE", np.array([1], np.int32))]))
        return out
