"""Triton's python-backend add/sub example, ported to Tessera: the import line changes, and tensors are
read and made as lists (Tessera's Python plugins have no numpy)."""

import json

import tessera as pb_utils  # in Triton: import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        output0 = pb_utils.get_output_config_by_name(self.model_config, "OUTPUT0")
        self.output0_dtype = output0["data_type"]

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            a, b = in_0.as_flat_list(), in_1.as_flat_list()
            out_0 = pb_utils.Tensor("OUTPUT0", [x + y for x, y in zip(a, b)], shape=in_0.shape())
            out_1 = pb_utils.Tensor("OUTPUT1", [x - y for x, y in zip(a, b)], shape=in_0.shape())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0, out_1]))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("add_sub_python: cleaning up")
