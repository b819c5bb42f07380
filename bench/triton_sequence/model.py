"""`simple_sequence` as Triton users write it for the python backend: the reference side of the sequence
benchmark (Triton 2.51 has no ONNX Runtime backend here), and the same file on Tessera's Python runtime.
Same semantics as Triton's example graph: OUTPUT = (INPUT + START) * READY, the sequence batcher filling in
START and READY."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            output = ((get("INPUT") + get("START")) * get("READY")).astype(np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
