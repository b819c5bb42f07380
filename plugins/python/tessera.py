"""Triton's python-backend API (`triton_python_backend_utils`) for Tessera's Python plugins, without numpy.

A Triton Python model ports by changing one import::

    import tessera as pb_utils      # was: import triton_python_backend_utils as pb_utils

`Tensor`, `InferenceRequest` (with `.exec()` for BLS), `InferenceResponse`, `TritonError`,
`get_input_tensor_by_name`, `get_output_tensor_by_name`, `get_input_config_by_name`,
`get_output_config_by_name`, `Logger` and, for `auto_complete_config`, `ModelConfig` keep their names and
meaning. Tensors hold Python lists instead of numpy arrays: `as_list()` reads one (nested by its shape),
`Tensor(name, values)` makes one (its data type comes from the model config's output of that name, or is
given). A large tensor passed on unread (into a response or a BLS request) is never copied.
"""

import json
import struct

from componentize_py_types import Err
from wit_world.imports import host, types

_DT = types.DataType
# KServe name, WIT data type, struct format ("" for types struct cannot pack).
_TYPES = [
    ("BOOL", _DT.BOOLEAN, "?"),
    ("UINT8", _DT.UINT8, "B"),
    ("UINT16", _DT.UINT16, "H"),
    ("UINT32", _DT.UINT32, "I"),
    ("UINT64", _DT.UINT64, "Q"),
    ("INT8", _DT.INT8, "b"),
    ("INT16", _DT.INT16, "h"),
    ("INT32", _DT.INT32, "i"),
    ("INT64", _DT.INT64, "q"),
    ("FP16", _DT.FP16, "e"),
    ("FP32", _DT.FP32, "f"),
    ("FP64", _DT.FP64, "d"),
    ("BF16", _DT.BF16, ""),
    ("BYTES", _DT.BYTES, ""),
]
_BY_NAME = {name: (wit, fmt) for name, wit, fmt in _TYPES}
_NAME_OF = {wit: name for name, wit, _ in _TYPES}

# Tensors up to this size travel inline (a copy is cheaper than a call to the host); larger ones as handles.
_INLINE_MAX = 16 * 1024

# The model configuration (Triton-style JSON as a dict), set at initialize: output data types come from it.
_model_config = {}


class TritonError(Exception):
    """An error with Triton's codes; raised by this module, and the way to fail one request."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message, code=UNKNOWN):
        super().__init__(message)
        self._message, self._code = message, code

    def message(self):
        return self._message

    def code(self):
        return self._code


TritonModelException = TritonError


class Tensor:
    """A named tensor. `Tensor(name, values, datatype=None, shape=None)`: `values` is a (nested) list of
    numbers, or of `bytes`/`str` for BYTES; the data type defaults to the config's for an output of that
    name, the shape to the nesting of `values`."""

    def __init__(self, name, values, datatype=None, shape=None):
        datatype = datatype or _configured_type(name) or _guess_type(values)
        if datatype not in _BY_NAME:
            raise TritonError(f"unknown data type {datatype!r} for tensor {name}", TritonError.INVALID_ARG)
        flat, nested_shape = _flatten(values)
        self._name, self._datatype = name, datatype
        self._shape = list(shape) if shape is not None else nested_shape
        self._bytes, self._handle = _pack(datatype, flat, name), None

    @classmethod
    def _wrap(cls, wit_tensor):
        tensor = cls.__new__(cls)
        tensor._name, tensor._datatype = wit_tensor.name, _NAME_OF[wit_tensor.datatype]
        tensor._shape = list(wit_tensor.shape)
        if isinstance(wit_tensor.data, types.TensorBytes_Inline):
            tensor._bytes, tensor._handle = wit_tensor.data.value, None
        else:
            tensor._bytes, tensor._handle = None, wit_tensor.data.value
        return tensor

    def name(self):
        return self._name

    def triton_dtype(self):
        return self._datatype

    datatype = triton_dtype

    def shape(self):
        return list(self._shape)

    def is_cpu(self):
        return True

    def as_bytes(self):
        """The raw little-endian bytes (BYTES: each element with its 4-byte length first)."""
        if self._bytes is None:
            self._bytes = self._handle.read()
        return self._bytes

    def as_flat_list(self):
        return _unpack(self._datatype, self.as_bytes(), self._name)

    def as_list(self):
        """The elements as nested lists, by the tensor's shape (BYTES elements as `bytes`)."""
        return _nest(self.as_flat_list(), self._shape)

    def as_numpy(self):
        raise TritonError("Tessera's Python plugins have no numpy: use as_list() or as_flat_list()", TritonError.UNSUPPORTED)

    def renamed(self, name):
        """The same tensor under another name; its data is not copied."""
        tensor = Tensor.__new__(Tensor)
        tensor.__dict__.update(self.__dict__)
        tensor._name = name
        return tensor

    def _to_wit(self):
        if self._handle is not None:
            data = types.TensorBytes_Held(self._handle.share())
        elif len(self._bytes) <= _INLINE_MAX:
            data = types.TensorBytes_Inline(self._bytes)
        else:
            data = types.TensorBytes_Held(types.TensorData(self._bytes))
        return types.Tensor(self._name, _BY_NAME[self._datatype][0], list(self._shape), data)


class InferenceRequest:
    """A request: the ones `execute` receives, or one made to call another model (BLS) with `exec()`."""

    def __init__(self, model_name="", inputs=None, requested_output_names=None, model_version=-1, request_id="",
                 parameters=None, **_ignored):
        self._model, self._version, self._id = model_name, model_version, request_id
        self._inputs = list(inputs or [])
        self._outputs = list(requested_output_names or [])
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})

    @classmethod
    def _wrap(cls, wit_request):
        parameters = {key: value.value for key, value in wit_request.parameters}
        return cls(inputs=[Tensor._wrap(t) for t in wit_request.inputs], requested_output_names=wit_request.requested_outputs,
                   request_id=wit_request.id, parameters=parameters)

    def inputs(self):
        return list(self._inputs)

    def request_id(self):
        return self._id

    def requested_output_names(self):
        return list(self._outputs)

    def parameters(self):
        """The request parameters as a JSON string, as Triton gives them."""
        return json.dumps(self._parameters)

    def model_name(self):
        return self._model

    def model_version(self):
        return self._version

    def exec(self, decoupled=False):
        """Runs this request on `model_name` through the server's scheduler. Errors come back in the
        response (`has_error()`), as in Triton."""
        if decoupled:
            raise TritonError("decoupled BLS calls are not supported", TritonError.UNSUPPORTED)
        version = "" if self._version in (-1, None, "") else str(self._version)
        request = types.Request(self._id, [t._to_wit() for t in self._inputs], self._outputs,
                                [(k, _parameter(v)) for k, v in self._parameters.items()])
        try:
            answer = host.infer(self._model, version, request)
        except Err as e:
            return InferenceResponse(error=TritonError(e.value))
        return InferenceResponse([Tensor._wrap(t) for t in answer.outputs])

    def async_exec(self, decoupled=False):
        raise TritonError("async BLS calls are not supported; use exec()", TritonError.UNSUPPORTED)


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._outputs, self._error = list(output_tensors or []), error

    def output_tensors(self):
        return list(self._outputs)

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


class Logger:
    @staticmethod
    def log(message, level=None):
        host.log(level or types.LogLevel.INFO, str(message))

    @staticmethod
    def log_info(message):
        host.log(types.LogLevel.INFO, str(message))

    @staticmethod
    def log_warn(message):
        host.log(types.LogLevel.WARN, str(message))

    @staticmethod
    def log_error(message):
        host.log(types.LogLevel.ERROR, str(message))

    @staticmethod
    def log_verbose(message):
        host.log(types.LogLevel.VERBOSE, str(message))


class ModelConfig:
    """What `auto_complete_config` receives and returns, as in Triton's python backend."""

    def __init__(self, config):
        self._config = config

    def as_dict(self):
        return self._config

    def max_batch_size(self):
        return int(self._config.get("max_batch_size", 0))

    def set_max_batch_size(self, value):
        self._config["max_batch_size"] = int(value)

    def set_dynamic_batching(self):
        self._config.setdefault("dynamic_batching", {})

    def add_input(self, tensor):
        self._add("input", tensor)

    def add_output(self, tensor):
        self._add("output", tensor)

    def _add(self, kind, tensor):
        declared = self._config.setdefault(kind, [])
        if any(t.get("name") == tensor["name"] for t in declared):
            return
        declared.append({"name": tensor["name"], "data_type": tensor["data_type"], "dims": list(tensor["dims"])})


def get_input_tensor_by_name(request, name):
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response, name):
    return next((t for t in response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config, name):
    return next((t for t in model_config.get("input", []) if t.get("name") == name), None)


def get_output_config_by_name(model_config, name):
    return next((t for t in model_config.get("output", []) if t.get("name") == name), None)


def _set_model_config(config):
    global _model_config
    _model_config = config


def _configured_type(name):
    declared = get_output_config_by_name(_model_config, name) or get_input_config_by_name(_model_config, name)
    if declared is None:
        return None
    config_type = declared.get("data_type", "")
    return "BYTES" if config_type == "TYPE_STRING" else config_type.removeprefix("TYPE_")


def _guess_type(values):
    flat, _ = _flatten(values)
    if flat and all(isinstance(v, (bytes, str)) for v in flat):
        return "BYTES"
    if flat and all(isinstance(v, bool) for v in flat):
        return "BOOL"
    if all(isinstance(v, int) for v in flat):
        return "INT64"
    return "FP64"


def _flatten(values):
    """(flat elements, shape) of nested lists; bytes and str are elements."""
    if not isinstance(values, (list, tuple)):
        return [values], []
    shape, level = [len(values)], values
    while level and isinstance(level[0], (list, tuple)):
        shape.append(len(level[0]))
        level = level[0]
    flat = list(values)
    for depth in range(len(shape) - 1):
        flat = [v for row in flat for v in row]
    return flat, shape


def _nest(flat, shape):
    for size in reversed(shape[1:]):
        flat = [flat[i:i + size] for i in range(0, len(flat), size)] if size else []
    return flat


def _pack(datatype, flat, name):
    if datatype == "BYTES":
        items = [v.encode() if isinstance(v, str) else bytes(v) for v in flat]
        return b"".join(struct.pack("<I", len(item)) + item for item in items)
    fmt = _BY_NAME[datatype][1]
    if not fmt:
        raise TritonError(f"{name}: {datatype} tensors can only be passed on, not made from a list", TritonError.UNSUPPORTED)
    try:
        return struct.pack(f"<{len(flat)}{fmt}", *flat)
    except struct.error as e:
        raise TritonError(f"{name}: cannot store these values as {datatype}: {e}", TritonError.INVALID_ARG) from None


def _unpack(datatype, data, name):
    if datatype == "BYTES":
        items, at = [], 0
        while at < len(data):
            (length,) = struct.unpack_from("<I", data, at)
            items.append(bytes(data[at + 4:at + 4 + length]))
            at += 4 + length
        return items
    fmt = _BY_NAME[datatype][1]
    if not fmt:
        raise TritonError(f"{name}: {datatype} tensors can only be read as bytes (as_bytes())", TritonError.UNSUPPORTED)
    return list(struct.unpack(f"<{len(data) // struct.calcsize(fmt)}{fmt}", data))


def _parameter(value):
    if isinstance(value, bool):
        return types.ParameterValue_Boolean(value)
    if isinstance(value, int):
        return types.ParameterValue_Int(value)
    if isinstance(value, float):
        return types.ParameterValue_Double(value)
    return types.ParameterValue_String(str(value))
