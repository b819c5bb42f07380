"""The JavaScript example of the default repository (`add_sub_js`, plugins/js/add_sub/app.js built with
componentize-js by setup) answers like `simple` over HTTP and gRPC."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT, add_sub_inputs

COMPONENT = ROOT / "model_repository" / "add_sub_js" / "1" / "model.wasm"
pytestmark = pytest.mark.skipif(not COMPONENT.exists(), reason="setup found no npm, so add_sub_js was not built")


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_add_sub_js_answers_like_simple(default_server, module):
    client = module.InferenceServerClient(default_server.http_url if module is httpclient else default_server.grpc_url)
    data = np.arange(48, dtype=np.int32).reshape(3, 16) - 20
    other = np.full((3, 16), 7, dtype=np.int32)
    inputs = add_sub_inputs(module, data)
    inputs[1].set_data_from_numpy(other)
    try:
        result = client.infer("add_sub_js", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + other)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data - other)
    finally:
        client.close()
