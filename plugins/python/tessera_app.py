"""The entry points of a Python model's component: `tessera:backend` calls on one side, the model's
`TritonPythonModel` (from its `model.py`) on the other. Tessera builds this module, `tessera.py` and the
model's version directory into one component with componentize-py."""

import json
import traceback

import wit_world
from componentize_py_types import Err, Ok
from wit_world.imports import types

import model as user_model
import tessera

_instance = None


def _describe(error):
    """A Python exception as a one-line message, with where it was raised."""
    if isinstance(error, tessera.TritonError):
        return error.message()
    where = traceback.extract_tb(error.__traceback__)
    place = f" (at {where[-1].filename.rsplit('/', 1)[-1]}:{where[-1].lineno})" if where else ""
    return f"{type(error).__name__}: {error}{place}"


class WitWorld(wit_world.WitWorld):
    def auto_complete_config(self, config_json):
        complete = getattr(user_model.TritonPythonModel, "auto_complete_config", None)
        if complete is None:
            return config_json
        try:
            config = complete(tessera.ModelConfig(json.loads(config_json)))
            return json.dumps(config.as_dict())
        except Exception as e:
            raise Err(_describe(e))

    def initialize(self, args):
        global _instance
        args = dict(args)
        try:
            tessera._set_model_config(json.loads(args.get("model_config", "{}")))
            _instance = user_model.TritonPythonModel()
            if hasattr(_instance, "initialize"):
                _instance.initialize(args)
        except Exception as e:
            raise Err(_describe(e))

    def execute(self, requests):
        try:
            responses = _instance.execute([tessera.InferenceRequest._wrap(r) for r in requests])
        except Exception as e:
            return [Err(_describe(e))] * len(requests)
        if not isinstance(responses, (list, tuple)) or len(responses) != len(requests):
            count = "no list" if not isinstance(responses, (list, tuple)) else f"{len(responses)} responses"
            return [Err(f"execute must return one InferenceResponse per request: got {count} for {len(requests)}")] * len(requests)
        return [self._answer(response) for response in responses]

    def finalize(self):
        if _instance is not None and hasattr(_instance, "finalize"):
            _instance.finalize()

    @staticmethod
    def _answer(response):
        if response.has_error():
            error = response.error()
            return Err(error.message() if isinstance(error, tessera.TritonError) else str(error))
        try:
            return Ok(types.Response([tensor._to_wit() for tensor in response.output_tensors()]))
        except Exception as e:
            return Err(_describe(e))
