"""Requests and responses inside Tessera's Python runtime: the `InferenceRequest`s `execute` receives and the ones a
model makes to call another model (BLS, `exec()`), `InferenceResponse`, `Logger`, the tensor lookups and
`get_model_dir`. Part of `triton_python_backend_utils` (see `tessera`)."""

import json

from componentize_py_types import Err
from wit_world.imports import host, types

from tessera_errors import TritonError
from tessera_tensor import Tensor

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# The model's directory (args["model_repository"]), set when the runtime imports the model.
_model_dir = ""


def set_model_dir(path):
    global _model_dir
    _model_dir = path


def get_model_dir():
    """The model's directory, as the sandbox shows it (the path Triton gives as args["model_repository"])."""
    return _model_dir


class InferenceRequest:
    """A request: the ones `execute` receives, or one made to call another model (BLS) with `exec()`."""

    def __init__(self, model_name="", inputs=None, requested_output_names=None, correlation_id=0, request_id="",
                 flags=0, timeout=0, preferred_memory=None, trace=None, parameters=None, model_version=-1):
        self._model, self._version, self._id = model_name, model_version, request_id
        self._correlation_id, self._flags, self._timeout = correlation_id, flags, timeout
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

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def timeout(self):
        return self._timeout

    def requested_output_names(self):
        return list(self._outputs)

    def parameters(self):
        """The request parameters as a JSON string, as Triton gives them."""
        return json.dumps(self._parameters)

    def model_name(self):
        return self._model

    def model_version(self):
        return self._version

    def is_cancelled(self):
        return False

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
        self._parameters = parameters

    def output_tensors(self):
        return list(self._outputs)

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


class LogLevel:
    """The levels `Logger.log` takes, as Triton names them."""

    INFO, WARNING, ERROR, VERBOSE = (types.LogLevel.INFO, types.LogLevel.WARN, types.LogLevel.ERROR,
                                     types.LogLevel.VERBOSE)


class Logger:
    """Lines into the server log, tagged with the model name and version."""

    @staticmethod
    def log(message, level=LogLevel.INFO):
        host.log(level, str(message))

    @staticmethod
    def log_info(message):
        host.log(LogLevel.INFO, str(message))

    @staticmethod
    def log_warn(message):
        host.log(LogLevel.WARNING, str(message))

    @staticmethod
    def log_error(message):
        host.log(LogLevel.ERROR, str(message))

    @staticmethod
    def log_verbose(message):
        host.log(LogLevel.VERBOSE, str(message))


def get_input_tensor_by_name(request, name):
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response, name):
    return next((t for t in response.output_tensors() if t.name() == name), None)


def _parameter(value):
    if isinstance(value, bool):
        return types.ParameterValue_Boolean(value)
    if isinstance(value, int):
        return types.ParameterValue_Int(value)
    if isinstance(value, float):
        return types.ParameterValue_Double(value)
    return types.ParameterValue_String(str(value))
