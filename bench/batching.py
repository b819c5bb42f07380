"""Dynamic batching on a compute-heavy ONNX model, and Tessera's serving overhead over bare ONNX Runtime.

Generates an MLP (by default 8 layers of 1024×1024 MatMul + Relu, FP32, variable batch: 32 MiB of weights,
more than the caches hold, so that one row costs a pass over all weights and a batch shares that pass) and
serves it twice from one Tessera: `heavy_batched` (dynamic batching) and `heavy` (the same model, batching
off; each request runs alone). perf_analyzer at concurrency 16 alternates between the two; the ratio is the
median of the paired throughput ratios. The serving overhead is Tessera's p50 over HTTP at concurrency 1
minus the p50 of `session.run` on the same input in ONNX Runtime's Python API (same library version, same
thread count), measured on the heavy model and on `simple_onnx` (add/sub on INT32[16], where the model's
own time is negligible and the difference is nearly all serving). perf_analyzer's p50 includes the client's
own work and the loopback round trip, so the same requests also go, interleaved with Tessera's, to the floor
(bench/floor.rs: a server that answers from memory with Tessera's own answers); Tessera's p50 minus the
floor's minus `session.run` is the part of the overhead that is Tessera's.

Run through `scripts/dev bench-batching` (after setup and bench install).
"""

import argparse
import statistics
import time

import numpy as np

from harness import CACHE, ROOT, TESSERA, Server, floor_server, free_port, interleaved, perf_analyzer

import os  # noqa: E402
import shutil  # noqa: E402

def heavy_model(path, width, layers):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, previous = [], [], "INPUT0"
    for layer in range(layers):
        weight = numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), f"w{layer}")
        inits.append(weight)
        nodes.append(helper.make_node("MatMul", [previous, f"w{layer}"], [f"m{layer}"]))
        out = "OUTPUT0" if layer == layers - 1 else f"r{layer}"
        nodes.append(helper.make_node("Relu", [f"m{layer}"], [out]))
        previous = out
    graph = helper.make_graph(
        nodes, "heavy",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


def prepare(intra_threads, width, layers):
    repo = CACHE / "repos" / "batching"
    threads = f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{intra_threads}" }} }}\n' if intra_threads else ""
    config = threads + f"""platform: "onnxruntime_onnx"
max_batch_size: 16
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
"""
    for name, extra in (("heavy", ""), ("heavy_batched", "dynamic_batching { max_queue_delay_microseconds: 2000 }\n")):
        heavy_model(repo / name / "1" / "model.onnx", width, layers)
        (repo / name / "config.pbtxt").write_text(config + extra)
    shutil.rmtree(repo / "simple_onnx", ignore_errors=True)
    shutil.copytree(ROOT / "model_repository" / "simple_onnx", repo / "simple_onnx")
    return repo


def bare_onnxruntime_p50(model, feeds, runs, intra_threads):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_threads or os.cpu_count()
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    for _ in range(20):
        session.run(None, feeds)
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--intra-threads", type=int, default=0, help="ONNX Runtime intra-op threads (0: the server's default)")
    parser.add_argument("--width", type=int, default=1024, help="MLP layer width")
    parser.add_argument("--layers", type=int, default=8, help="MLP depth")
    args = parser.parse_args()
    repo = prepare(args.intra_threads, args.width, args.layers)
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
        floor = floor_server(server, "simple_onnx")
        floor.start()
        try:
            servers = {"tessera": server, "floor": floor}
            tiny_runs = interleaved(2 * args.trials, lambda n: perf_analyzer(servers[n], "http", 1, args.measurement_ms, model="simple_onnx", stability=100), names=tuple(servers))
        finally:
            floor.stop()
    finally:
        server.stop()
    x = np.random.default_rng(1).standard_normal((1, args.width)).astype(np.float32)
    bare = bare_onnxruntime_p50(repo / "heavy" / "1" / "model.onnx", {"INPUT0": x}, 300, args.intra_threads)
    ints = np.arange(16, dtype=np.int32).reshape(1, 16)
    bare_tiny = bare_onnxruntime_p50(repo / "simple_onnx" / "1" / "model.onnx", {"INPUT0": ints, "INPUT1": ints}, 2000, args.intra_threads)
    tiny_p50 = statistics.median(t[1] for t in tiny_runs["tessera"])
    floor_p50 = statistics.median(t[1] for t in tiny_runs["floor"])
    own = statistics.median(t[1] - f[1] for t, f in zip(tiny_runs["tessera"], tiny_runs["floor"])) - bare_tiny
    ratio = statistics.median(b[0] / u[0] for b, u in zip(by_model["heavy_batched"], by_model["heavy"]))
    batched = statistics.median(p[0] for p in by_model["heavy_batched"])
    unbatched = statistics.median(p[0] for p in by_model["heavy"])
    print()
    threads = args.intra_threads or "default"
    print(f"MLP {args.layers}x{args.width} FP32, gRPC, concurrency 16, {args.trials} trials of {args.measurement_ms} ms each, "
          f"{os.cpu_count()} cores, intra-op threads {threads}:")
    print("| model | infer/s |")
    print("|---|---|")
    print(f"| dynamic batching on | {batched:.0f} |")
    print(f"| batching off | {unbatched:.0f} |")
    print(f"| ratio (median of paired trials) | {ratio:.2f}× |")
    print()
    print(f"single request, HTTP, concurrency 1: Tessera p50 {single[1]:.0f} µs; bare ONNX Runtime session.run p50 {bare:.0f} µs; "
          f"serving overhead {single[1] - bare:.0f} µs")
    print(f"single request, HTTP, concurrency 1, simple_onnx (median of {2 * args.trials}): Tessera p50 {tiny_p50:.0f} µs; "
          f"bare session.run p50 {bare_tiny:.0f} µs; serving overhead {tiny_p50 - bare_tiny:.0f} µs")
    print(f"the same requests against the floor (a server answering from memory): p50 {floor_p50:.0f} µs, what client and "
          f"loopback cost alone; Tessera's own share (median of paired Tessera − floor, minus session.run): {own:.0f} µs")


if __name__ == "__main__":
    main()
