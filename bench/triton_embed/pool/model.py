"""Mean pooling over the attention mask and L2 normalisation in numpy, as sentence-transformers does."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            states = pb_utils.get_input_tensor_by_name(request, "last_hidden_state").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy().astype(np.float32)
            mean = (states * mask[..., None]).sum(1) / np.clip(mask.sum(1, keepdims=True), 1e-9, None)
            embedding = mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", embedding.astype(np.float32))]))
        return responses
