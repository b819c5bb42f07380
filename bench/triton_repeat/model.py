"""`repeat_int32` as Triton users write a decoupled model for the python backend: the reference side of the
streaming benchmark, and the same file on Tessera's Python runtime. Same semantics as plugins/repeat: for each
element i of IN, wait DELAY[i] ms, send OUT = [IN[i]], IDX = [i]; then the final flag alone."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            if values.shape != delays.shape:
                error = pb_utils.TritonError(f"expected IN and DELAY shape to match, got {list(values.shape)} and {list(delays.shape)}")
                sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for index, (value, delay) in enumerate(zip(values, delays)):
                if delay:
                    time.sleep(delay / 1000)
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                idx = pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32))
                sender.send(pb_utils.InferenceResponse([out, idx]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
