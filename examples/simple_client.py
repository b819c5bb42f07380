"""Calls the default repository's `simple` model with the stock tritonclient, over HTTP and gRPC — exactly
the code a Triton user already has. Start the server with `scripts/dev serve`, then:

    .venv/bin/python examples/simple_client.py [--http localhost:8000] [--grpc localhost:8001]
"""

import argparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def call(module, url):
    client = module.InferenceServerClient(url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [module.InferInput("INPUT0", a.shape, "INT32"), module.InferInput("INPUT1", b.shape, "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs)
    print(f"{module.__name__}: {a[0]} + {b[0]} = {result.as_numpy('OUTPUT0')[0]}")
    print(f"{module.__name__}: {a[0]} - {b[0]} = {result.as_numpy('OUTPUT1')[0]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", default="localhost:8000", help="HTTP endpoint (host:port)")
    parser.add_argument("--grpc", default="localhost:8001", help="gRPC endpoint (host:port)")
    args = parser.parse_args()
    call(httpclient, args.http)
    call(grpcclient, args.grpc)
