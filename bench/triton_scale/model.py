"""An FP32 scaling as Triton users write python models: OUTPUT0 is a new array, 2 × INPUT0. Served unchanged by
Tessera and by Triton's python backend for the shared-memory benchmark (bench/shared_memory.py): beside the
identity, it is the case where the model's output must leave the interpreter."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data * 2)]))
        return responses
