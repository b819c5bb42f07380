"""Requests and responses inside Tessera's Python runtime: the `InferenceRequest`s `execute` receives and the ones a
model makes to call another model (BLS, `exec()`), `InferenceResponse`, the response sender of decoupled models,
`Logger`, the tensor lookups and `get_model_dir`. Part of `triton_python_backend_utils` (see `tessera`)."""

import json

from componentize_py_types import Err
from wit_world.imports import host, streaming, types

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
        # pybind11 takes bytes for Triton's std::string arguments (a name read from a BYTES tensor is bytes).
        if isinstance(model_name, bytes):
            model_name = model_name.decode()
        if isinstance(request_id, bytes):
            request_id = request_id.decode()
        self._model, self._version, self._id = model_name, model_version, request_id
        self._correlation_id, self._flags, self._timeout = correlation_id, flags, timeout
        self._inputs = list(inputs or [])
        self._outputs = list(requested_output_names or [])
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})
        # For a request `execute` received: its position in the batch, and its response sender once asked for.
        self._index, self._sender = None, None

    @classmethod
    def _wrap(cls, wit_request, index):
        parameters = {key: value.value for key, value in wit_request.parameters}
        # The sequence parameters, as Triton's python backend gives them: the correlation id and the flags. In a
        # batch the sequence batcher formed, they are those of its first request (each row's own id is in the
        # CORRID control input, where the config asks for one).
        flags = (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if parameters.get("sequence_start") is True else 0) | (
            TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if parameters.get("sequence_end") is True else 0)
        correlation_id = parameters.get("sequence_id", 0)
        if isinstance(correlation_id, int) and correlation_id < 0:
            correlation_id += 1 << 64  # the server carries an unsigned id in a signed 64-bit parameter
        request = cls(inputs=[Tensor._wrap(t) for t in wit_request.inputs],
                      requested_output_names=wit_request.requested_outputs, request_id=wit_request.id,
                      parameters=parameters, correlation_id=correlation_id, flags=flags)
        request._index = index
        return request

    def get_response_sender(self):
        """Where a decoupled model sends this request's responses (the same sender every time it is asked)."""
        if self._sender is None:
            if self._index is None:
                raise TritonError("only a request that execute received has a response sender")
            try:
                self._sender = InferenceResponseSender(streaming.sender(self._index))
            except Err as e:
                raise TritonError(e.value)
        return self._sender

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

    def _sequence_parameters(self):
        """The parameters a BLS request carries: its own, and its correlation id and sequence flags as the
        server reads them (`sequence_id`; an unsigned id past 2**63 goes in the signed 64 bits)."""
        parameters = dict(self._parameters)
        correlation_id = self._correlation_id
        if correlation_id not in (0, "", None):
            if isinstance(correlation_id, int) and correlation_id >= 1 << 63:
                correlation_id -= 1 << 64
            parameters["sequence_id"] = correlation_id
            parameters["sequence_start"] = bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
            parameters["sequence_end"] = bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
        return parameters

    def model_version(self):
        return self._version

    def trace(self):
        """The request's trace, to pass on to a BLS request (`InferenceRequest(..., trace=request.trace())`).
        The server already traces a BLS call as a child of the traced request being executed."""
        return InferenceTrace()

    def is_cancelled(self):
        """Whether the client has gone away (always False for a model that is not decoupled)."""
        try:
            return self.get_response_sender().is_cancelled()
        except TritonError:
            return False

    def exec(self, decoupled=False):
        """Runs this request on `model_name` through the server's scheduler. Errors come back in the
        response (`has_error()`), as in Triton. `decoupled=True` (for a callee that may be decoupled) returns
        an iterator over its responses; the last one may have no outputs, as in Triton."""
        version = "" if self._version in (-1, None, "") else str(self._version)
        request = types.Request(self._id, [t._to_wit() for t in self._inputs], self._outputs,
                                [(k, _parameter(v)) for k, v in self._sequence_parameters().items()])
        if decoupled:
            try:
                return _responses(streaming.infer_stream(self._model, version, request))
            except Err as e:
                return iter([InferenceResponse(error=TritonError(e.value))])
        try:
            answer = host.infer(self._model, version, request)
        except Err as e:
            return InferenceResponse(error=TritonError(e.value))
        return InferenceResponse([Tensor._wrap(t) for t in answer.outputs])

    def async_exec(self, decoupled=False):
        raise TritonError("async BLS calls are not supported; use exec()", TritonError.UNSUPPORTED)


class InferenceTrace:
    """A request's trace as Triton's python backend hands it over. Its OpenTelemetry context is not given to
    plugins: `get_context()` answers None."""

    def get_context(self, mode="opentelemetry"):
        return None


class InferenceResponseSender:
    """A decoupled model's way to answer one request with any number of responses: `send(response)` for each,
    and `flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL` on the last (with or without a response). A send the
    server cannot deliver (after the final one, after the request timed out) raises `TritonError`."""

    def __init__(self, wit_sender):
        self._sender = wit_sender

    def send(self, response=None, flags=0):
        last = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        try:
            if response is not None and response.has_error():
                error = response.error()
                message = error.message() if isinstance(error, TritonError) else str(error)
                self._sender.send_error(message, last)
            else:
                outputs = None if response is None else types.Response([t._to_wit() for t in response.output_tensors()])
                self._sender.send(outputs, last)
        except Err as e:
            raise TritonError(f"Unable to send response: {e.value}")

    def is_cancelled(self):
        return self._sender.is_cancelled()


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
    # A loop over the request's own list: the call every model makes for every input, kept to plain lookups.
    for tensor in request._inputs:
        if tensor._name == name:
            return tensor
    return None


def get_output_tensor_by_name(response, name):
    return next((t for t in response.output_tensors() if t.name() == name), None)


def _responses(stream):
    """The responses of an `exec(decoupled=True)` call, read as the iteration asks for them."""
    while (answer := stream.next()) is not None:
        if isinstance(answer, Err):
            yield InferenceResponse(error=TritonError(answer.value))
        else:
            yield InferenceResponse([Tensor._wrap(t) for t in answer.value.outputs])


def _parameter(value):
    if isinstance(value, bool):
        return types.ParameterValue_Boolean(value)
    if isinstance(value, int):
        return types.ParameterValue_Int(value)
    if isinstance(value, float):
        return types.ParameterValue_Double(value)
    return types.ParameterValue_String(str(value))
