"""Dynamic batching on a compute-heavy ONNX model, and Tessera's serving overhead over bare ONNX Runtime.

Generates an MLP (8 layers of 512×512 MatMul + Relu, FP32, variable batch) and serves it twice from one
Tessera: `heavy_batched` (dynamic batching) and `heavy` (the same model, batching off; each request runs
alone). perf_analyzer at concurrency 16 alternates between the two; the ratio is the median of the paired
throughput ratios. The overhead is Tessera's p50 over HTTP at concurrency 1 minus the p50 of
`session.run` on the same input in ONNX Runtime's Python API (same library version, same thread count).

Run through `scripts/dev bench-batching` (after setup and bench install).
"""

import argparse
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run import CACHE, TESSERA, Server, free_port, interleaved, perf_analyzer  # noqa: E402

import os  # noqa: E402

WIDTH, LAYERS = 512, 8


def heavy_model(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, previous = [], [], "INPUT0"
    for layer in range(LAYERS):
        weight = numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32), f"w{layer}")
        inits.append(weight)
        nodes.append(helper.make_node("MatMul", [previous, f"w{layer}"], [f"m{layer}"]))
        out = "OUTPUT0" if layer == LAYERS - 1 else f"r{layer}"
        nodes.append(helper.make_node("Relu", [f"m{layer}"], [out]))
        previous = out
    graph = helper.make_graph(
        nodes, "heavy",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def prepare(intra_threads):
    repo = CACHE / "repos" / "batching"
    threads = f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{intra_threads}" }} }}\n' if intra_threads else ""
    config = threads + f"""platform: "onnxruntime_onnx"
max_batch_size: 16
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
"""
    for name, extra in (("heavy", ""), ("heavy_batched", "dynamic_batching { max_queue_delay_microseconds: 2000 }\n")):
        heavy_model(repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(config + extra)
    return repo


def bare_onnxruntime_p50(model, runs, intra_threads):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_threads or os.cpu_count()
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, WIDTH)).astype(np.float32)
    for _ in range(20):
        session.run(None, {"INPUT0": x})
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, {"INPUT0": x})
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--intra-threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: the server's default)")
    args = parser.parse_args()
    repo = prepare(args.intra_threads)
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [str(TESSERA), "--model-repository", str(repo), "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
               "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    server = Server("tessera-batching", command, {**os.environ, "TESSERA_LOG": "warn"}, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}")
    server.start()
    try:
        by_model = {}
        for trial in range(args.trials):
            order = ["heavy_batched", "heavy"] if trial % 2 == 0 else ["heavy", "heavy_batched"]
            for model in order:
                by_model.setdefault(model, []).append(perf_analyzer(server, "grpc", 16, args.measurement_ms, model=model))
        # A 300 µs model at concurrency 1 varies more between windows on this noisy machine than 50%.
        single = perf_analyzer(server, "http", 1, args.measurement_ms, model="heavy", stability=100)
    finally:
        server.stop()
    bare = bare_onnxruntime_p50(repo / "heavy" / "1" / "model.onnx", 300, args.intra_threads)
    ratio = statistics.median(b[0] / u[0] for b, u in zip(by_model["heavy_batched"], by_model["heavy"]))
    batched = statistics.median(p[0] for p in by_model["heavy_batched"])
    unbatched = statistics.median(p[0] for p in by_model["heavy"])
    print()
    threads = args.intra_threads or "default"
    print(f"MLP {LAYERS}x{WIDTH} FP32, gRPC, concurrency 16, {args.trials} trials of {args.measurement_ms} ms each, "
          f"{os.cpu_count()} cores, intra-op threads {threads}:")
    print("| model | infer/s |")
    print("|---|---|")
    print(f"| dynamic batching on | {batched:.0f} |")
    print(f"| batching off | {unbatched:.0f} |")
    print(f"| ratio (median of paired trials) | {ratio:.2f}× |")
    print()
    print(f"single request, HTTP, concurrency 1: Tessera p50 {single[1]:.0f} µs; bare ONNX Runtime session.run p50 {bare:.0f} µs; "
          f"serving overhead {single[1] - bare:.0f} µs")


if __name__ == "__main__":
    main()
