"""Ensembles against the real Triton, in one run on this machine:

- ensemble overhead: `simple` alone, and `simple_twice` (an ensemble running `simple` twice, the second
  step on the first one's outputs), on Tessera (Wasm plugin) and Triton 2.51 (python backend), perf_analyzer
  p50 at concurrency 1 and throughput at 16, over HTTP and gRPC; the cost of the extra step is the
  difference of the two p50s. Also a sequential tritonclient loop: one `simple_twice` call against two
  `simple` calls one after the other, which is what the ensemble saves a client;
- `embed` (sentence embeddings: tokenize -> minilm -> pool) with one sentence per request, at concurrency 1
  and 16: Tessera's ensemble (Python tokenizer plugin, ONNX Runtime, Rust pooling plugin) against the same
  pipeline as Triton's users can build it here, three python-backend models in an ensemble (Hugging Face
  `tokenizers`, ONNX Runtime inside model.py, numpy pooling: bench/triton_embed/); and the compute floor,
  the same three steps called in one Python process with no server at all.

The servers are interleaved trial by trial (A B, then B A) so that machine drift hits both. Prints a
Markdown table and writes it under .cache/bench/results/. Run through `scripts/dev bench-ensembles`.
"""

import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

from harness import CACHE, NUMPY, ROOT, TESSERA, interleaved, perf_analyzer, ratio, save_results, tessera_server, triton_server

SENTENCE = "Tessera serves Triton's model repositories and runs custom model code as WebAssembly."
SITE_PACKAGES = pathlib.Path(sys.executable).parent.parent / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
# What the python-backend models import, linked into each model directory (Triton's python stub runs an
# isolated interpreter whose sys.path holds the model directory): numpy < 2 for the stub, and the venv's
# tokenizers and onnxruntime with what onnxruntime imports.
TRITON_IMPORTS = [NUMPY / "numpy", NUMPY / "numpy.libs"] + [
    SITE_PACKAGES / name for name in ("tokenizers", "onnxruntime", "flatbuffers", "packaging", "google")
]


def simple_twice(name="simple_twice"):
    """An ensemble of `simple` twice: (a+b)+(a-b) = 2a and (a+b)-(a-b) = 2b."""
    tensors = "".join(
        f'{kind} {{ name: "{n}" data_type: TYPE_INT32 dims: [ 16 ] }}\n'
        for kind, n in (("input", "INPUT0"), ("input", "INPUT1"), ("output", "OUTPUT0"), ("output", "OUTPUT1"))
    )
    step = 'step {{ model_name: "simple" model_version: -1 input_map {{ key: "INPUT0" value: "{}" }} ' \
           'input_map {{ key: "INPUT1" value: "{}" }} output_map {{ key: "OUTPUT0" value: "{}" }} ' \
           'output_map {{ key: "OUTPUT1" value: "{}" }} }}\n'
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{tensors}ensemble_scheduling {{\n'
            + step.format("INPUT0", "INPUT1", "sum", "difference")
            + step.format("sum", "difference", "OUTPUT0", "OUTPUT1") + "}\n")


def model_dir(root, name, config, files=()):
    directory = root / name
    (directory / "1").mkdir(parents=True)
    (directory / "config.pbtxt").write_text(config)
    for source, target in files:
        shutil.copy(source, directory / "1" / target)
    return directory


def repositories():
    """Tessera's and Triton's repositories for this run, the configs the same but for the backend lines."""
    repos = CACHE / "repos" / "ensembles"
    shutil.rmtree(repos, ignore_errors=True)
    models = ROOT / "model_repository"
    simple_config = (models / "simple" / "config.pbtxt").read_text()
    embed_config = (models / "embed" / "config.pbtxt").read_text()

    tessera = repos / "tessera"
    model_dir(tessera, "simple", simple_config, [(models / "simple/1/model.wasm", "model.wasm")])
    model_dir(tessera, "simple_twice", simple_twice())
    for name in ("tokenize", "minilm", "pool"):
        shutil.copytree(models / name, tessera / name)
    model_dir(tessera, "embed", embed_config)

    triton = repos / "triton"
    python = [model_dir(triton, "simple", simple_config.replace('backend: "wasm"', 'backend: "python"'),
                        [(ROOT / "bench/triton_simple/model.py", "model.py")])]
    model_dir(triton, "simple_twice", simple_twice())
    tokenize_config = (
        'name: "tokenize"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]\noutput [\n'
        + ",\n".join(f'  {{ name: "{n}" data_type: TYPE_INT64 dims: [ -1 ] }}'
                     for n in ("input_ids", "attention_mask", "token_type_ids")) + "\n]\n"
    )
    embed = ROOT / "bench" / "triton_embed"
    python.append(model_dir(triton, "tokenize", tokenize_config, [
        (embed / "tokenize/model.py", "model.py"), (models / "tokenize/1/tokenizer.json", "tokenizer.json")]))
    python.append(model_dir(triton, "minilm",
                            (models / "minilm/config.pbtxt").read_text().replace('platform: "onnxruntime_onnx"', 'backend: "python"'),
                            [(embed / "minilm/model.py", "model.py"), (models / "minilm/1/model.onnx", "model.onnx")]))
    python.append(model_dir(triton, "pool", (models / "pool/config.pbtxt").read_text().replace('backend: "wasm"', 'backend: "python"'),
                            [(embed / "pool/model.py", "model.py")]))
    model_dir(triton, "embed", embed_config)
    for directory in python:
        for package in TRITON_IMPORTS:
            (directory / package.name).symlink_to(package)
    return tessera, triton


def client_loop(server, calls, models):
    """Sequential tritonclient gRPC calls, each call being `models` one after the other; median µs."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    timings = []
    for _ in range(calls):
        start = time.perf_counter()
        for model in models:
            client.infer(model, inputs)
        timings.append(time.perf_counter() - start)
    client.close()
    return statistics.median(timings) * 1e6


def compute_floor(calls):
    """The embed pipeline for one sentence in this process, no server: median µs per sentence."""
    import numpy as np
    import onnxruntime
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(ROOT / "model_repository/tokenize/1/tokenizer.json"))
    tokenizer.enable_padding(pad_id=0)
    tokenizer.enable_truncation(128)
    session = onnxruntime.InferenceSession(str(ROOT / "model_repository/minilm/1/model.onnx"))
    timings = []
    for _ in range(calls):
        start = time.perf_counter()
        encoding = tokenizer.encode_batch([SENTENCE])
        ids = np.array([e.ids for e in encoding], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoding], dtype=np.int64)
        states = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        mean = (states * mask[..., None]).sum(1) / np.clip(mask.sum(1, keepdims=True), 1e-9, None)
        mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--measurement-ms", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=2000, help="sequential client calls per server")
    args = parser.parse_args()
    began = time.monotonic()
    tessera_repo, triton_repo = repositories()
    servers = {"tessera": tessera_server(tessera_repo, TESSERA), "triton": triton_server(triton_repo)}
    servers["tessera"].env = {**servers["tessera"].env,
                              "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as data:
        json.dump({"data": [{"TEXT": [SENTENCE]}]}, data)
    lines = []
    for server in servers.values():
        server.start()
    try:
        for protocol in ("http", "grpc"):
            points = {}
            for model, concurrency in (("simple", 1), ("simple_twice", 1), ("simple_twice", 16), ("embed", 1), ("embed", 16)):
                # embed serves ~100 sentences a second per core: windows of 300 requests end within an attempt.
                extra = {"input_data": data.name, "window_requests": 300} if model == "embed" else {}
                points[model, concurrency] = interleaved(args.trials, lambda n: perf_analyzer(
                    servers[n], protocol, concurrency, args.measurement_ms, model=model, **extra))
            lines += table_rows(protocol, points)
        loops = interleaved(args.trials, lambda n: (client_loop(servers[n], args.calls // args.trials, ["simple", "simple"]),
                                                     client_loop(servers[n], args.calls // args.trials, ["simple_twice"])))
    finally:
        for server in servers.values():
            server.stop()
        os.unlink(data.name)
    for name in ("tessera", "triton"):
        two = statistics.median(t for t, _ in loops[name])
        one = statistics.median(e for _, e in loops[name])
        lines.append(f"| gRPC client loop | two `simple` calls vs one `simple_twice` call, {name} | "
                     f"{two:.0f} µs vs {one:.0f} µs | |")
    floor = compute_floor(args.calls)
    lines.append(f"| in-process floor | tokenizers + ONNX Runtime + numpy, one sentence, no server | p50 {floor:.0f} µs "
                 f"({1e6 / floor:.0f}/s sequential) | |")
    report(lines, args, time.monotonic() - began)


def table_rows(protocol, points):
    """Markdown rows for one protocol: the ensemble's extra-step cost, and each point with its ratio."""
    def median(model, concurrency, name, index):
        return statistics.median(p[index] for p in points[model, concurrency][name])

    rows = []
    for name in ("tessera", "triton"):
        # The median of the per-trial differences: each trial measures both models back to back.
        extra = statistics.median(twice[1] - once[1] for twice, once in
                                  zip(points["simple_twice", 1][name], points["simple", 1][name]))
        rows.append(f"| {protocol} c=1 | extra step (`simple_twice` p50 - `simple` p50, median of per-trial differences), {name} | "
                    f"{median('simple_twice', 1, name, 1):.0f} - {median('simple', 1, name, 1):.0f}: {extra:.0f} µs | |")
    for (model, concurrency), runs in points.items():
        if model == "simple":
            continue
        index = 1 if concurrency == 1 else 0
        what = "p50 µs" if index == 1 else "throughput infer/s"
        ours = [p[index] for p in runs["tessera"]]
        theirs = [p[index] for p in runs["triton"]]
        rows.append(f"| {protocol} c={concurrency} | `{model}` {what}: Tessera / Triton | "
                    f"{statistics.median(ours):.0f} / {statistics.median(theirs):.0f} | {ratio(ours, theirs):.2f} |")
    return rows


def report(lines, args, elapsed):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%MZ")
    text = "\n".join([
        f"Ensembles, {stamp}: `scripts/dev bench-ensembles --trials {args.trials} --measurement-ms {args.measurement_ms}` "
        f"({elapsed / 60:.1f} min, {os.cpu_count()} CPUs)", "",
        "| point | what | value | ratio |", "|---|---|---|---|", *lines,
    ])
    save_results("ensembles", stamp, text)


if __name__ == "__main__":
    main()
