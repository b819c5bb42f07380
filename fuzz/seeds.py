"""Writes the starting corpus of each fuzz target (`fuzz/corpus/<target>/`) from real inputs: the
repository's own config.pbtxt files, requests as tritonclient builds them over HTTP and gRPC, repository
load requests with a config and files, BYTES buffers and plugin operation sequences. libFuzzer mutates these;
what it adds to the corpus stays there between runs.

Usage: seeds.py CORPUS_DIR
"""

import base64
import gzip
import hashlib
import json
import pathlib
import struct
import sys

import numpy as np
import tritonclient.grpc.service_pb2 as pb

ROOT = pathlib.Path(__file__).resolve().parent.parent


def write(corpus, target, data):
    folder = corpus / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def bytes_elements(*elements):
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def model_configs(corpus):
    for path in sorted(ROOT.glob("model_repository/*/config.pbtxt")) + sorted(ROOT.glob("tests/**/config.pbtxt")):
        write(corpus, "model_config", path.read_bytes())
    config = {"name": "fuzz", "backend": "onnxruntime", "max_batch_size": 4,
              "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [3]}],
              "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [3]}],
              "dynamic_batching": {"max_queue_delay_microseconds": 100}}
    write(corpus, "model_config", json.dumps(config).encode())


def http_requests(corpus):
    ints = list(range(16))
    header = {"id": "7", "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [ints]},
        {"name": "INPUT1", "shape": [1, 2], "datatype": "BYTES", "data": ["a", "bc"]},
        {"name": "INPUT3", "shape": [1, 1], "datatype": "BOOL", "data": [True]}],
        "outputs": [{"name": "INPUT0"}, {"name": "INPUT1", "parameters": {"binary_data": True}}]}
    body = json.dumps(header).encode()
    write(corpus, "http_infer", b"\n\n" + body)
    write(corpus, "http_infer", b"\ngzip\n" + gzip.compress(body))
    # The binary extension, as tritonclient sends it.
    int_bytes = np.arange(32, dtype=np.int32).tobytes()
    strings = bytes_elements(b"x", b"yz")
    half = np.ones((2, 2), dtype=np.float16).tobytes()
    header = {"inputs": [
        {"name": "INPUT0", "shape": [2, 16], "datatype": "INT32", "parameters": {"binary_data_size": len(int_bytes)}},
        {"name": "INPUT1", "shape": [2, 1], "datatype": "BYTES", "parameters": {"binary_data_size": len(strings)}},
        {"name": "INPUT2", "shape": [2, 1, 2], "datatype": "FP16", "parameters": {"binary_data_size": len(half)}}],
        "parameters": {"binary_data_output": True}}
    json_part = json.dumps(header).encode()
    write(corpus, "http_infer", b"%d\n\n" % len(json_part) + json_part + int_bytes + strings + half)


def grpc_requests(corpus):
    request = pb.ModelInferRequest(model_name="fuzz", id="1")
    for name, datatype, shape in [("INPUT0", "INT32", [1, 16]), ("INPUT1", "BYTES", [1, 2])]:
        request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.extend([np.arange(16, dtype=np.int32).tobytes(), bytes_elements(b"a", b"bc")])
    request.outputs.add(name="INPUT1")
    write(corpus, "grpc_infer", request.SerializeToString())
    typed = pb.ModelInferRequest(model_name="fuzz")
    t = typed.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    t.contents.int_contents.extend(range(16))
    t = typed.inputs.add(name="INPUT1", datatype="BYTES", shape=[1, 1])
    t.contents.bytes_contents.append(b"hello")
    t = typed.inputs.add(name="INPUT3", datatype="BOOL", shape=[1, 1])
    t.contents.bool_contents.append(True)
    typed.parameters["sequence_id"].int64_param = 3
    write(corpus, "grpc_infer", typed.SerializeToString())


def load_requests(corpus):
    config = json.dumps({"name": "fuzz", "backend": "onnxruntime"})
    body = {"parameters": {"config": config, "file:1/model.onnx": base64.b64encode(b"\x08\x07").decode(),
                           "file:1/sub/weights.bin": base64.b64encode(b"w").decode()}}
    write(corpus, "repository_load", b"\x00" + json.dumps(body).encode())
    request = pb.RepositoryModelLoadRequest(model_name="fuzz")
    request.parameters["config"].string_param = config
    request.parameters["file:1/model.onnx"].bytes_param = b"\x08\x07"
    write(corpus, "repository_load", b"\x01" + request.SerializeToString())


def bytes_tensors(corpus):
    write(corpus, "bytes_tensor", bytes_elements(b"", b"a", b"\xff" * 300))


def plugin_operations(corpus):
    # new(2 KiB), share(0), output INPUT0 of [16] INT32s from a new 64-byte handle, read, drop.
    ops = [(0, 1, 1, 0), (3, 0, 0, 0), (0, 2, 8, 0), (5, 2, 16 << 3, 0x38), (1, 0, 0, 0), (4, 1, 0, 0)]
    write(corpus, "wit_tensor_data", b"".join(bytes(op) for op in ops))


def main():
    corpus = pathlib.Path(sys.argv[1])
    for seed in (model_configs, http_requests, grpc_requests, load_requests, bytes_tensors, plugin_operations):
        seed(corpus)


if __name__ == "__main__":
    main()
