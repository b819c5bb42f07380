"""The JavaScript and C examples of the default repository (`add_sub_js` from plugins/js/add_sub/app.js built
with componentize-js, `add_sub_c` from plugins/c/add_sub/add_sub.c built with clang and wasi-libc, both by
setup) answer like `simple` over HTTP and gRPC, wrapping around on INT32 overflow as `simple` does."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import EXAMPLE_MODELS, ROOT, add_sub_inputs

# Why setup may have left a kind of example unbuilt.
UNBUILT = {
    "javascript": "setup found no npm, so {model} was not built",
    "c": "setup found no clang-19 and could not install it, so {model} was not built",
}
EXAMPLES = {model: UNBUILT[kind].format(model=model) for kind in UNBUILT for model in EXAMPLE_MODELS[kind]}


@pytest.mark.parametrize("model", list(EXAMPLES))
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_example_answers_like_simple(default_server, module, model):
    if not (ROOT / "model_repository" / model / "1" / "model.wasm").exists():
        pytest.skip(EXAMPLES[model])
    client = module.InferenceServerClient(default_server.http_url if module is httpclient else default_server.grpc_url)
    data = np.arange(48, dtype=np.int32).reshape(3, 16) - 20
    data[2, 15] = np.iinfo(np.int32).max
    other = np.full((3, 16), 7, dtype=np.int32)
    inputs = add_sub_inputs(module, data)
    inputs[1].set_data_from_numpy(other)
    try:
        result = client.infer(model, inputs)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + other)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data - other)
    finally:
        client.close()
