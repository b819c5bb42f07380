"""all-MiniLM-L6-v2 as a Triton user runs it from the python backend: ONNX Runtime inside model.py, on the
same int8 graph (model.onnx beside this file)."""

import os

import onnxruntime
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.dirname(os.path.realpath(__file__))
        self.session = onnxruntime.InferenceSession(os.path.join(here, "model.onnx"))

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                     for name in ("input_ids", "attention_mask", "token_type_ids")}
            states = self.session.run(["last_hidden_state"], feeds)[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("last_hidden_state", states)]))
        return responses
