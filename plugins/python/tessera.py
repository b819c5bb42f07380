"""Triton's python-backend API (`triton_python_backend_utils`) inside Tessera's Python runtime.

Triton models import it under its own name (`import triton_python_backend_utils as pb_utils`); `tessera` is the
same module. Tensors are numpy arrays as in Triton: `as_numpy()` reads one (a read-only view of the bytes the
server sent, not a copy; BYTES as an object array of `bytes`), `Tensor(name, ndarray)` makes one. Tessera also
takes Python lists: `Tensor(name, [[1, 2]], "INT32")` (the data type defaults to the config's output of that
name), `as_list()` / `as_flat_list()`. A large tensor passed on unread (into a response or a BLS request) is
never copied.

The parts live in `tessera_tensor` (tensors, data types), `tessera_requests` (requests, responses, BLS,
logging), `tessera_config` (`ModelConfig`, config helpers) and `tessera_errors`; every public name is here."""

from tessera_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from tessera_errors import TritonError, TritonModelException
from tessera_requests import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    InferenceTrace,
    Logger,
    LogLevel,
    get_input_tensor_by_name,
    get_model_dir,
    get_output_tensor_by_name,
)
from tessera_tensor import (
    TRITON_STRING_TO_NUMPY,
    Tensor,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "ModelConfig",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]
