"""Tessera's Python runtime: the entry points of the one component (CPython 3.14, numpy, this module and
`tessera`) that runs every Python model. `tessera:backend` calls arrive here; the model's `model.py` is
imported from its directory inside the sandbox, as Triton's python-backend stub imports it, when an instance
is initialised (or asked to complete its configuration). A new or changed `model.py` therefore costs an
import, not a build.

What is imported here is imported when the component is built (componentize-py runs this module's top level
then and keeps the interpreter's memory), so it costs nothing per instance. numpy loads its submodules lazily
and the component cannot import numpy's files later, so every submodule is imported now. The standard library
stays importable at run time: the server mounts it read-only where CPython looks for it."""

import importlib
# `importlib.invalidate_caches()`, called when an instance imports its model, imports importlib.metadata: at run
# time that would put the package and the modules it needs into every instance's own memory (6.5 MiB an
# instance, compiled from source there); imported here it is part of the shared image.
import importlib.metadata  # noqa: F401
import json
import operator
import os
import sys
import traceback

import numpy
import numpy.fft
import numpy.lib.recfunctions
import numpy.lib.scimath
import numpy.lib.stride_tricks
import numpy.linalg
import numpy.ma
import numpy.polynomial
import numpy.random
import numpy.strings
import numpy.char  # noqa: F401
import wit_world
from componentize_py_types import Err, Ok
from wit_world.imports import host, types

import tessera
import tessera_config
import tessera_requests
import tessera_tensor


def _cheap_wit_enums(*enums):
    """componentize-py makes each WIT enum value it hands to Python by calling the enum class with the
    discriminant (`DataType(11)`), and reads each one it takes back through `.value`; on `enum.Enum` both run
    the enum module's Python code, about a tenth of a small model's call (add_sub: two tensors in, two out).
    Each class gets a metaclass whose call is its value-to-member map's lookup, and a `value` read straight
    from the member: the same members, with no Python frame either way. Only discriminants the WIT defines
    arrive (componentize-py checks them before the call)."""
    for cls in enums:
        cls.__class__ = type(f"{cls.__name__}Meta", (type(cls),), {"__call__": cls._value2member_map_.__getitem__})
        cls.value = property(operator.attrgetter("_value_"))


_cheap_wit_enums(types.DataType, types.LogLevel)

# The name Triton models import it by; the same module object, so both names see the same state.
sys.modules["triton_python_backend_utils"] = tessera
# The model directory is read-only; nothing is compiled into it.
sys.dont_write_bytecode = True

_instance = None
# Whether the served model is decoupled: its execute answers through response senders and returns None.
_decoupled = False


def _import_model(version_dir, file_name):
    """Imports the model's module as Triton's stub does: the version directory and the model directory on
    sys.path, the module imported as `<version>.<name>` (so a model's relative imports work). The working
    directory is the version directory (Triton leaves the server's, which the sandbox does not show)."""
    model_dir, package = os.path.split(version_dir)
    # The import system's view of directories dates from the build: look again (the standard library, whose
    # directory the build had, is now the server's mount of it).
    importlib.invalidate_caches()
    for path in (version_dir, model_dir):
        if path not in sys.path:
            sys.path.append(path)
    os.chdir(version_dir)
    tessera_requests.set_model_dir(model_dir)
    return importlib.import_module(f"{package}.{file_name.removesuffix('.py')}")


def _model_file(config):
    return config.get("default_model_filename") or "model.py"


def _describe(error, model_dir=None):
    """A Python exception as a one-line message, with where in the model's code it was raised."""
    if isinstance(error, tessera.TritonError):
        return error.message()
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if model_dir and f.filename.startswith(model_dir + "/")] or frames[-1:]
    place = f" (at {own[-1].filename.rsplit('/', 1)[-1]}:{own[-1].lineno})" if own else ""
    return f"{type(error).__name__}: {error}{place}"


class WitWorld(wit_world.WitWorld):
    def auto_complete_config(self, config_json):
        try:
            config = json.loads(config_json)
            model = _import_model(host.version_directory(), _model_file(config))
            complete = getattr(model.TritonPythonModel, "auto_complete_config", None)
            if complete is None:
                return config_json
            answer = complete(tessera.ModelConfig(config))
            if not isinstance(answer, tessera.ModelConfig):
                raise tessera.TritonError(f"auto_complete_config function in model '{config.get('name', '')}' must "
                                          "return a valid pb.ModelConfig object.")
            return json.dumps(answer.as_dict())
        except Exception as e:
            raise Err(_describe(e, tessera_requests.get_model_dir()))

    def initialize(self, args):
        global _instance, _decoupled
        args = dict(args)
        try:
            config = json.loads(args.get("model_config", "{}"))
            tessera_config.set_served(config)
            _decoupled = tessera.using_decoupled_model_transaction_policy(config)
            model = _import_model(host.version_directory(), _model_file(config))
            _instance = model.TritonPythonModel()
            if hasattr(_instance, "initialize"):
                _instance.initialize(args)
        except Exception as e:
            raise Err(_describe(e, tessera_requests.get_model_dir()))

    def execute(self, requests):
        try:
            return self._execute(requests)
        finally:
            tessera_tensor.forget_reads()

    def _execute(self, requests):
        model_dir = tessera_requests.get_model_dir()
        try:
            responses = _instance.execute([tessera.InferenceRequest._wrap(r, i) for i, r in enumerate(requests)])
        except Exception as e:
            return [Err(_describe(e, model_dir))] * len(requests)
        if _decoupled:
            if responses is not None:
                return [Err("Python model is using the decoupled mode and the execute function must return None.")] * len(requests)
            return []
        if not isinstance(responses, (list, tuple)) or len(responses) != len(requests):
            count = "no list" if not isinstance(responses, (list, tuple)) else f"{len(responses)} responses"
            return [Err(f"execute must return one InferenceResponse per request: got {count} for {len(requests)}")] * len(requests)
        return [_answer(response, model_dir) for response in responses]

    def finalize(self):
        if _instance is not None and hasattr(_instance, "finalize"):
            _instance.finalize()


def _answer(response, model_dir):
    if not isinstance(response, tessera.InferenceResponse):
        return Err(f"execute must return InferenceResponse objects, not {type(response).__name__}")
    if response.has_error():
        error = response.error()
        return Err(error.message() if isinstance(error, tessera.TritonError) else str(error))
    try:
        return Ok(types.Response([tensor._to_wit() for tensor in response.output_tensors()]))
    except Exception as e:
        return Err(_describe(e, model_dir))
