"""`TritonError`, the error of Triton's python-backend API: raised by the runtime, and the way a model fails
one request (`InferenceResponse(error=TritonError(...))`). Part of `triton_python_backend_utils`."""


class TritonError(Exception):
    """An error with one of Triton's codes."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message, code=UNKNOWN):
        super().__init__(message)
        self._message, self._code = message, code

    def message(self):
        return self._message

    def code(self):
        return self._code


TritonModelException = TritonError
