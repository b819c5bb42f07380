"""A small classifier (8 features -> 16 ReLU -> 3 classes) whose weights are numpy arrays in weights/ beside
this file, loaded in initialize with the two idioms Triton python models use to find their files."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.class_dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, "CLASS")["data_type"])
        # The python backend's idiom: the model directory and version from args.
        weights = os.path.join(args["model_repository"], args["model_version"], "weights")
        self.w1 = np.load(os.path.join(weights, "w1.npy"))
        self.b1 = np.load(os.path.join(weights, "b1.npy"))
        # And the other one: the directory of this file.
        here = os.path.dirname(os.path.realpath(__file__))
        self.w2 = np.load(os.path.join(here, "weights", "w2.npy"))
        self.b2 = np.load(os.path.join(here, "weights", "b2.npy"))

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            hidden = np.maximum(x @ self.w1 + self.b1, 0)
            logits = hidden @ self.w2 + self.b2
            exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probabilities = (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)
            classes = np.argmax(logits, axis=-1).reshape(-1, 1).astype(self.class_dtype)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PROBABILITIES", probabilities), pb_utils.Tensor("CLASS", classes)]))
        return responses
