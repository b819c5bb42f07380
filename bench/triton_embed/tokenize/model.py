"""The `embed` pipeline's first step as a Triton user writes it for the python backend: Hugging Face
`tokenizers` with all-MiniLM-L6-v2's tokenizer.json (beside this file), padded to the batch's longest."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.dirname(os.path.realpath(__file__))
        self.tokenizer = Tokenizer.from_file(os.path.join(here, "tokenizer.json"))
        self.tokenizer.enable_padding(pad_id=0)
        self.tokenizer.enable_truncation(128)

    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            encodings = self.tokenizer.encode_batch([t.decode("utf-8", "replace") for t in texts])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("input_ids", ids),
                pb_utils.Tensor("attention_mask", mask),
                pb_utils.Tensor("token_type_ids", np.zeros_like(ids)),
            ]))
        return responses
