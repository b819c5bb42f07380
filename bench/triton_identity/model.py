"""An FP32 identity as Triton users write python models: OUTPUT0 is INPUT0. Served unchanged by Tessera and by
Triton's python backend for the shared-memory benchmark (bench/shared_memory.py)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data)]))
        return responses
